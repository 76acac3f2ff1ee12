"""A throwaway Debian nginx on loopback, for the tests that put one in front of tallyd
(test_cache.py, test_proxy.py).

Nginx(site) writes a main configuration of its own (one process, master_process off, its prefix,
temp directories, pid and error log in a temporary directory; access log off) whose http {} block
holds `site(dir, port)`: the text of a site configuration that listens on 127.0.0.1:port and may
use dir for files of its own. The port is a free one, tried again if nginx cannot bind it. Stopped
by its PID (SIGQUIT, nginx's graceful stop)."""

import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
HAVE_NGINX = os.access(NGINX, os.X_OK)
NO_NGINX = "no nginx at %s (Debian's nginx package: make deps)" % NGINX

MAIN_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log %(level)s;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    include %(dir)s/site.conf;
}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Nginx:
    host = "127.0.0.1"

    def __init__(self, site, error_level="warn"):
        self.dir = tempfile.mkdtemp(prefix="tally-nginx-")
        self.port = None
        self.proc = None
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(MAIN_CONF % {"dir": self.dir, "level": error_level})
        try:
            for attempt in range(5):
                self.port = free_port()
                with open(os.path.join(self.dir, "site.conf"), "w") as f:
                    f.write(site(self.dir, self.port))
                self.proc = subprocess.Popen([NGINX, "-p", self.dir + "/", "-c", conf, "-e",
                                              os.path.join(self.dir, "error.log")],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if self._wait_up():
                    return
                self.stop()
            raise AssertionError("nginx did not start:\n" + self.error_log())
        except BaseException:
            self.close()
            raise

    def _wait_up(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def request(self, path, headers=None, method="GET", body=None, source=None):
        """One request on a new connection (from the address source, when given):
        (status, lowercased headers, body bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10,
                                          source_address=(source, 0) if source else None)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
