// The texture binding compiled into the CUDA library (PRERAST_CUDA_LIBRARY is set for all of its sources): the same
// source as the CPU library's, registering its CUDA kernels. A file of its own so that the two builds of one
// source get object files of their own.
#include "../texture.cpp"
