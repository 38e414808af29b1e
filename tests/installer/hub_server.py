# A small HTTP server laid out like the Hugging Face Hub (CLIENTS.md section 5) over a folder ROOT/<org>/<name>/...:
# the revision and tree APIs (with lfs sha256/size and Link pagination) and resolve URLs with HEAD and Range GETs.
# Used by the installer tests; also runnable by hand: python tests/installer/hub_server.py ROOT [PORT].
import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

TREE_PAGE_SIZE = 2   # small on purpose, so clients must follow the Link header


def repo_commit(repo: str) -> str:
    return hashlib.sha1(repo.encode()).hexdigest()


class HubState:
    """What the server serves and what it saw; tests change the knobs between requests."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.bytes_per_s: float | None = None     # throttle for file bodies (None = full speed)
        self.required_token: str | None = None    # when set, requests without "Bearer <token>" get 401
        self.drop_after_bytes: int | None = None  # the next file body is cut off after this many bytes, once
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def log(self, method: str, path: str, headers) -> None:
        with self.lock:
            self.requests.append({"method": method, "path": path, "range": headers.get("Range"),
                                  "authorization": headers.get("Authorization")})

    def file_gets(self, name: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["method"] == "GET" and "/resolve/" in r["path"]
                    and r["path"].endswith("/" + name)]


def _sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


class HubHandler(BaseHTTPRequestHandler):
    server_version = "FakeHub/1"
    state: HubState   # set on the class made by make_server

    def log_message(self, fmt, *args):   # quiet
        pass

    def _json(self, status: int, body, extra_headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, code: str) -> None:
        self._json(404, {"error": code}, {"X-Error-Code": code})

    def _authorized(self) -> bool:
        if self.state.required_token and self.headers.get("Authorization") != f"Bearer {self.state.required_token}":
            self._json(401, {"error": "Invalid credentials"})
            return False
        return True

    def _repo_dir(self, org: str, name: str) -> Path | None:
        repo_dir = self.state.root / org / name
        return repo_dir if repo_dir.is_dir() else None

    def do_GET(self):
        self._handle(head_only=False)

    def do_HEAD(self):
        self._handle(head_only=True)

    def _handle(self, head_only: bool):
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        self.state.log(self.command, url.path, self.headers)
        if not self._authorized():
            return
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] in ("revision", "tree"):
            repo_dir = self._repo_dir(parts[2], parts[3])
            if repo_dir is None:
                return self._not_found("RepoNotFound")
            repo = f"{parts[2]}/{parts[3]}"
            if parts[4] == "revision":
                files = sorted(p.relative_to(repo_dir).as_posix() for p in repo_dir.rglob("*") if p.is_file())
                return self._json(200, {"id": repo, "sha": repo_commit(repo),
                                        "siblings": [{"rfilename": f} for f in files]})
            return self._tree(repo, repo_dir, url)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_dir = self._repo_dir(parts[0], parts[1])
            if repo_dir is None:
                return self._not_found("RepoNotFound")
            file_path = repo_dir.joinpath(*parts[4:])
            if not file_path.is_file():
                return self._not_found("EntryNotFound")
            return self._file(f"{parts[0]}/{parts[1]}", file_path, head_only)
        self._not_found("NotFound")

    def _tree(self, repo: str, repo_dir: Path, url):
        entries = []
        for path in sorted(p for p in repo_dir.rglob("*") if p.is_file()):
            size = path.stat().st_size
            entries.append({"type": "file", "path": path.relative_to(repo_dir).as_posix(), "size": size,
                            "oid": hashlib.sha1(path.name.encode()).hexdigest(),
                            "lfs": {"oid": _sha256_file(path), "size": size, "pointerSize": 134}})
        cursor = int(parse_qs(url.query).get("cursor", ["0"])[0])
        page = entries[cursor:cursor + TREE_PAGE_SIZE]
        headers = {}
        if cursor + TREE_PAGE_SIZE < len(entries):
            host = self.headers.get("Host")
            next_url = f"http://{host}{url.path}?recursive=true&expand=false&cursor={cursor + TREE_PAGE_SIZE}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._json(200, page, headers)

    def _file(self, repo: str, file_path: Path, head_only: bool):
        size = file_path.stat().st_size
        start, end = 0, size            # bytes [start, end) are sent
        range_header = self.headers.get("Range")
        if range_header and range_header.startswith("bytes="):
            first, last = range_header[len("bytes="):].split("-")
            start = int(first)
            end = min(size, int(last) + 1) if last else size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if range_header else 200)
        self.send_header("X-Repo-Commit", repo_commit(repo))
        self.send_header("ETag", f'"{hashlib.sha1(file_path.name.encode()).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if range_header:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if head_only:
            return
        self._send_body(file_path, start, end)

    def _send_body(self, file_path: Path, start: int, end: int):
        piece = 64 << 10
        with self.state.lock:
            drop_after, self.state.drop_after_bytes = self.state.drop_after_bytes, None
        sent = 0
        with open(file_path, "rb") as f:
            f.seek(start)
            try:
                for block in iter(lambda: f.read(min(piece, end - start - sent)), b""):
                    if drop_after is not None and sent + len(block) > drop_after:
                        self.wfile.write(block[:drop_after - sent])
                        self.wfile.flush()
                        self.close_connection = True   # a dropped connection: the body ends early
                        return
                    self.wfile.write(block)
                    sent += len(block)
                    if self.state.bytes_per_s:
                        time.sleep(len(block) / self.state.bytes_per_s)
            except (BrokenPipeError, ConnectionResetError):
                pass


def make_server(root: Path, port: int = 0) -> tuple[ThreadingHTTPServer, HubState]:
    state = HubState(root)
    handler = type("BoundHubHandler", (HubHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server, state


if __name__ == "__main__":
    hub, _ = make_server(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8765)
    print(f"serving {sys.argv[1]} on http://127.0.0.1:{hub.server_address[1]}", flush=True)
    hub.serve_forever()
