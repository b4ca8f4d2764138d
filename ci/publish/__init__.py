"""Publishing: the index pages (index.py), the checks before a tag and the manifests (release.py), which
targets a tag publishes (plan.py), the release assets (upload.py), and the rehearsal of all of it here with
stand-ins for GitHub (rehearse.py, gh_standin.py, pages_url.py, shared_torch.py)."""
