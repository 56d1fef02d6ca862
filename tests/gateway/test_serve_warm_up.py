"""``serve`` pays pyarrow's one-time import of pandas (on its first conversion, which every
sidecar parsed makes) before it listens: the first ``/api/granules/NAME`` took 0.15-0.8 s for
it, the next ones a few milliseconds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHECK = textwrap.dedent("""
    import sys
    import uvicorn
    from h5sidecar.gateway import app
    from h5sidecar.settings import GatewaySettings

    async def serve(self, sockets=None):  # where the server would start listening
        print("pandas imported:", "pandas" in sys.modules)

    uvicorn.Server.serve = serve
    app.serve(GatewaySettings(host="127.0.0.1", port=1), sys.argv[1])
""")


def test_serve_is_warm_before_it_listens(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], check=False,
                         capture_output=True,
                         text=True, timeout=120, cwd=Path(__file__).parents[2])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "pandas imported: True" in out.stdout, out.stdout
