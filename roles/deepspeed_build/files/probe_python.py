"""Print, as JSON, what a DeepSpeed build needs to know about an interpreter.

Run on the build host by the deepspeed_build role, with the interpreter that
makes the build venv (and with the venv's own). Reads only; imports torch only
if it is already installed.
"""
import importlib.util
import json
import os
import sys
import sysconfig

info = {
    "version": "%d.%d.%d" % sys.version_info[:3],
    "tag": "cp%d%d" % sys.version_info[:2],
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
    "pip": importlib.util.find_spec("pip") is not None,
    "venv": importlib.util.find_spec("venv") is not None and importlib.util.find_spec("ensurepip") is not None,
    "headers": os.path.exists(os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")),
    "torch": None,
}
if importlib.util.find_spec("torch") is not None:
    import torch  # noqa: E402

    info["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda}
print(json.dumps(info))
