"""Writes OUT/credpkg-0.1.0-py3-none-any.whl: one pure-Python module, for the pypiserver test."""

import base64
import hashlib
import os
import sys
import zipfile

out, name, ver = sys.argv[1], "credpkg", "0.1.0"
files = {
    name + "/__init__.py": "HELLO = 'credpkg imported'\n",
    "%s-%s.dist-info/METADATA" % (name, ver): "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, ver),
    "%s-%s.dist-info/WHEEL" % (name, ver): "Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for p, t in files.items():
    d = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
    record.append("%s,sha256=%s,%d" % (p, d, len(t.encode())))
rec = "%s-%s.dist-info/RECORD" % (name, ver)
record.append(rec + ",,")
files[rec] = "\n".join(record) + "\n"
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(os.path.join(out, "%s-%s-py3-none-any.whl" % (name, ver)), "w") as z:
    for p, t in files.items():
        z.writestr(p, t)
