"""CI replay of the server request fuzzer (issue 35 §6): the committed corpus
(fuzz/corpus/server/: the outside probe's findings and generated seeds), then 300
cases generated from a fixed seed, against a server on 127.0.0.1. Exits 1 on any
server fault, hang or wrong answer; prints one line per failing case.

    PYTHONPATH=python XRT_BUILD_DIR=build/<dir> python3 fuzz/replay_server_corpus.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import server_request_fuzzer

if __name__ == "__main__":
    sys.exit(
        server_request_fuzzer.main(
            [
                "--replay",
                str(server_request_fuzzer.CORPUS),
                "--runs",
                "300",
                "--seed",
                "35",
                "--max-seconds",
                "240",
            ]
        )
    )
