"""The tools two hosts on one GPU machine need, for a machine whose image lacks them (the GPU image has no `ip`, `ss`,
`ssh`, `ssh-keygen` or `sshd`): Debian bookworm's packages of them and of the libraries they link, fetched here by
apt at the versions and sha256 pinned in two_host_tools.lock, carried there, and unpacked into a folder of their
own (never over the image's `/`), each tool behind a wrapper that points it at its libraries alone.

    python -m benchmarks.two_host_tools fetch DEBS           # here: download (cached in DEBS), check the pins
    python -m benchmarks.two_host_tools fetch DEBS --repin   # here: take apt's current versions, rewrite the lock
    python -m benchmarks.two_host_tools install DEBS PREFIX  # there: unpack, write PREFIX/bin; put it first on PATH

`install` also adds sshd's privilege-separation user when the machine has none (sshd will not start without it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.infra.files import sha256_of

LOCK = Path(__file__).with_name("two_host_tools.lock")
# the tools, then the libraries `ldd` names for sshd, ssh, ssh-keygen, ip and ss on bookworm (glibc is the image's:
# any glibc at least bookworm's 2.36 runs them)
TOOLS = ("iproute2", "openssh-client", "openssh-server")
LIBRARIES = (
    "libaudit1", "libbpf1", "libbsd0", "libcap-ng0", "libcap2", "libcom-err2", "libcrypt1", "libelf1", "libgcrypt20",
    "libgpg-error0", "libgssapi-krb5-2", "libk5crypto3", "libkeyutils1", "libkrb5-3", "libkrb5support0", "liblz4-1",
    "liblzma5", "libmd0", "libmnl0", "libnsl2", "libpam0g", "libpcre2-8-0", "libselinux1", "libssl3", "libsystemd0",
    "libtirpc3", "libwrap0", "libzstd1", "zlib1g",
)  # fmt: skip
# tool name -> its path inside the unpacked packages
WRAPPED = {
    "ip": "bin/ip",
    "ss": "bin/ss",
    "ssh": "usr/bin/ssh",
    "ssh-keygen": "usr/bin/ssh-keygen",
    "sshd": "usr/sbin/sshd",
}
LIBRARY_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")
LOADER = "/lib64/ld-linux-x86-64.so.2"  # the image's dynamic loader (x86-64's fixed path)
# Debian's openssh-server makes this user; sshd's pre-authentication child runs as it
PRIVSEP_USER = "sshd:x:104:65534::/run/sshd:/usr/sbin/nologin\n"


def fetch(debs: Path, *, repin: bool) -> dict[str, str]:
    """The pinned packages in `debs` (downloaded where missing), checked against the lock; with `repin`, apt's current
    versions downloaded and the lock rewritten from them. Returns {filename: sha256}."""
    debs.mkdir(parents=True, exist_ok=True)
    if repin:
        for deb in debs.glob("*.deb"):
            deb.unlink()
        _download(debs, [*TOOLS, *LIBRARIES])
        pinned = {deb.name: sha256_of(deb) for deb in sorted(debs.glob("*.deb"))}
        LOCK.write_text(json.dumps({"distribution": "debian bookworm amd64", "files": pinned}, indent=1) + "\n")
        return pinned
    pinned = json.loads(LOCK.read_text())["files"]
    missing = [name for name in pinned if not (debs / name).is_file()]
    if missing:
        # a deb's file name is package_version_arch.deb, and apt takes package=version (its epoch is not in the name)
        _download(debs, [_apt_spec(name) for name in missing])
    wrong = [name for name, digest in pinned.items() if sha256_of(debs / name) != digest]
    if wrong:
        raise SystemExit(
            f"{LOCK}: {', '.join(wrong)} differ from their pinned sha256; delete them from {debs} and fetch again, or "
            "take apt's current versions with --repin"
        )
    return dict(pinned)


def _apt_spec(filename: str) -> str:
    package, version, _ = filename.removesuffix(".deb").split("_")
    return f"{package}={version.replace('%3a', ':')}"


def _download(debs: Path, specs: list[str]) -> None:
    done = subprocess.run(["apt-get", "download", *specs], cwd=debs, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"apt-get download {' '.join(specs)} failed ({done.stderr.strip()[-600:]}); a version gone from the "
            f"mirror is re-pinned with: python -m benchmarks.two_host_tools fetch {debs} --repin"
        )


def install(debs: Path, prefix: Path) -> Path:
    """Every pinned package unpacked under PREFIX/root, a wrapper per tool in PREFIX/bin; that folder."""
    pinned = json.loads(LOCK.read_text())["files"]
    prefix = prefix.resolve()  # the wrappers name absolute paths: sshd re-execs only from one
    root = prefix / "root"
    root.mkdir(parents=True, exist_ok=True)
    for name, digest in pinned.items():
        if sha256_of(debs / name) != digest:
            raise SystemExit(f"{debs / name}: not the file {LOCK} pins (sha256 {digest})")
        subprocess.run(["dpkg-deb", "-x", str(debs / name), str(root)], check=True)
    bin_dir = prefix / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    libraries = ":".join(str(root / d) for d in LIBRARY_DIRS)
    for tool, inside in WRAPPED.items():
        wrapper = bin_dir / tool
        if tool == "sshd":
            # sshd re-execs its own path for each connection, so its libraries must be in its environment; it gives
            # its sessions (Ray, Python) an environment of its own making, without them
            line = f"LD_LIBRARY_PATH={libraries} exec {root / inside}"
        else:
            # through the loader, so the libraries reach the tool alone: `ip netns exec` runs the night itself, which
            # must load the image's libraries, not these
            line = f"exec {LOADER} --library-path {libraries} {root / inside}"
        wrapper.write_text(f'#!/bin/sh\n{line} "$@"\n')
        wrapper.chmod(0o755)
    passwd = Path("/etc/passwd")
    if not any(line.startswith("sshd:") for line in passwd.read_text().splitlines()):
        with passwd.open("a") as out:
            out.write(PRIVSEP_USER)
    return bin_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.two_host_tools", description=__doc__.split("\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    fetching = verbs.add_parser("fetch", help="download the pinned packages (here, where apt reaches Debian)")
    fetching.add_argument("debs", type=Path)
    fetching.add_argument("--repin", action="store_true", help="take apt's current versions and rewrite the lock")
    installing = verbs.add_parser("install", help="unpack them into PREFIX and write PREFIX/bin (there)")
    installing.add_argument("debs", type=Path)
    installing.add_argument("prefix", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "fetch":
        pinned = fetch(args.debs, repin=args.repin)
        size = sum((args.debs / name).stat().st_size for name in pinned)
        print(f"{len(pinned)} packages in {args.debs} ({size / 2**20:.1f} MiB), as {LOCK.name} pins them")
    else:
        if os.geteuid() != 0 or shutil.which("dpkg-deb") is None:
            raise SystemExit("install needs root and dpkg-deb (it adds sshd's user to /etc/passwd): run it there")
        bin_dir = install(args.debs, args.prefix)
        print(f"tools in {bin_dir}: {', '.join(WRAPPED)}; export PATH={bin_dir}:$PATH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
