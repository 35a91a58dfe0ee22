"""An unmodified-looking user script under horovodrun ends with identical parameters on all ranks."""
import os
import re
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "user_train.py")


@pytest.mark.parametrize("num_proc", [2, 4])
def test_user_script_under_horovodrun(num_proc):
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    run = subprocess.run([horovodrun, "-np", str(num_proc), "-H", f"localhost:{num_proc}", "--gloo",
                          sys.executable, SCRIPT, "topk:ratio=0.01"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    digests = dict(re.findall(r"digest (\d+) ([0-9a-f]{64})", run.stdout))
    assert sorted(digests) == [str(r) for r in range(num_proc)]
    assert len(set(digests.values())) == 1
