"""The controller's C heap: free pages handed back to the system."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not _GLIBC, reason="malloc_trim is glibc's")
def test_free_heap_pages_go_back_to_the_system() -> None:
    # a fresh interpreter frees 200 MiB of small blocks, then trims: its resident set falls
    code = (
        "import re\n"
        "from bellows.service.allocator import release_free_heap\n"
        "def rss():\n"
        "    text = open('/proc/self/status').read()\n"
        "    return int(re.search(r'VmRSS:\\s+(\\d+)', text)[1])\n"
        "blocks = [bytearray(100_000) for _ in range(2_000)]\n"
        "del blocks[:-1]\n"
        "before = rss()\n"
        "print(release_free_heap(), before - rss())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    released, freed_kib = out.stdout.split()
    assert released == "True"
    assert int(freed_kib) > 50_000
