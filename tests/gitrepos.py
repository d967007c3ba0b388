"""Real git repositories for tests: an 'upstream' laid out as GitHub serves one (main, refs/pull/N/head)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.org",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.org",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    # no automatic gc: git runs it detached after a commit past its threshold (vLLM's tree of 4,000 files is past
    # it), and a gc repacking a repository while a test copies or removes it pulls its objects from under the copy
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",
}


class Upstream:
    """A bare 'remote' plus a working clone used to author its commits."""

    def __init__(self, root: Path) -> None:
        self.remote = root / "o" / "upstream.git"  # its URL ends like github.com/o/upstream
        self.work = root / "upstream-work"
        self._tick = 0
        self.remote.parent.mkdir(parents=True)
        self._git_in(root, "init", "--quiet", "--bare", "--initial-branch=main", str(self.remote))
        # GitHub lets a client fetch a commit by its SHA; a local bare repository must be told to.
        self._git_in(self.remote, "config", "uploadpack.allowAnySHA1InWant", "true")
        self._git_in(root, "init", "--quiet", "--initial-branch=main", str(self.work))
        self.git("remote", "add", "origin", str(self.remote))

    @classmethod
    def copied(cls, made: Path, root: Path, tick: int) -> Upstream:
        """A copy under `root` of the upstream made under `made` (whose clock had reached `tick`): the same commits,
        and the next ones dated as the original's next would have been."""
        for name in ("o", "upstream-work"):
            shutil.copytree(made / name, root / name, symlinks=True)
        copy = cls.__new__(cls)
        copy.remote, copy.work, copy._tick = root / "o" / "upstream.git", root / "upstream-work", tick
        copy.git("remote", "set-url", "origin", str(copy.remote))
        copy._tick = tick  # setting the remote is no commit: the clock stays where the original's was
        return copy

    @property
    def tick(self) -> int:
        return self._tick

    @property
    def url(self) -> str:
        return f"file://{self.remote}"

    def git(self, *args: str) -> str:
        return self._git_in(self.work, *args)

    def _git_in(self, where: Path, *args: str) -> str:
        self._tick += 1
        date = f"2026-11-01T00:{self._tick // 60:02d}:{self._tick % 60:02d}Z"  # distinct, repeatable dates
        env = dict(os.environ) | _ENV | {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        done = subprocess.run(
            ["git", "-C", str(where), *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
        return done.stdout.strip()

    def commit(self, files: dict[str, str | None], message: str) -> str:
        """Write (or, for None, delete) files and commit them on the current branch; returns the SHA."""
        for name, text in files.items():
            path = self.work / name
            if text is None:
                self.git("rm", "--quiet", name)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            self.git("add", name)
        self.git("commit", "--quiet", "-m", message)
        return self.git("rev-parse", "HEAD")

    def checkout(self, branch: str, start: str | None = None) -> None:
        if start is None:
            self.git("checkout", "--quiet", branch)
        else:
            self.git("checkout", "--quiet", "-B", branch, start)

    def publish_main(self) -> str:
        self.git("push", "--quiet", "--force", "origin", "main:refs/heads/main")
        return self.git("rev-parse", "main")

    def publish_pull(self, number: int, branch: str) -> str:
        """What GitHub does for a PR: its head under refs/pull/N/head."""
        self.git("push", "--quiet", "--force", "origin", f"{branch}:refs/pull/{number}/head")
        return self.git("rev-parse", branch)

    def show(self, commit: str, path: str) -> str:
        return self._git_in(self.remote, "show", f"{commit}:{path}")
