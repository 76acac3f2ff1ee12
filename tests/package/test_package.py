#!/usr/bin/env python3
"""The Debian package and make install, as a user gets them.

Builds the package (make deb), runs lintian on it, extracts it into a scratch root (dpkg -x) and
checks what it holds: both programs report the changelog's version, the man pages render without
warnings and say exactly what --help says, the configuration file lists every flag with its
default and whether it reloads, the packaged tallyd starts from the packaged configuration (with a
data directory of the test's) and answers a write, the maintainer scripts create the user and on
purge remove /etc/tally only, the unit passes systemd-analyze verify and rates at most 2.0 in
systemd-analyze security. Then make install DESTDIR=... (PREFIX=/usr and the default /usr/local).

Run from the tree's top: python3 tests/package/test_package.py. Ends with "N passed, N failed".
"""
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VERSION = open(os.path.join(TOP, "VERSION")).read().strip()
SCRATCH = tempfile.mkdtemp(prefix="tally-package-")
ROOT = os.path.join(SCRATCH, "root")  # the package, extracted
NOT_IN_FILE = {"--config", "--version", "--help", "--print-config-template"}  # flags only the command line takes


def run(cmd, **kw):
    kw.setdefault("cwd", TOP)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def changelog_version():
    return run(["dpkg-parsechangelog", "-S", "Version"]).stdout.strip()


def help_items(text):
    """--help of tallyd: [(flag line, description joined by spaces)] and the notes after them."""
    items, notes = [], []
    for line in text.splitlines()[1:]:
        if line.startswith("  --"):
            head, desc = line[2:], ""
            if len(line) > 29 and line[27:29] == "  ":
                head, desc = line[2:27], line[29:]
            items.append([head.rstrip(), desc])
        elif line.startswith("   ") and items:
            items[-1][1] = (items[-1][1] + " " + line.strip()).strip()
        elif line.strip():
            notes.append(line.strip())
    return [(h, d) for h, d in items], " ".join(notes)


def unroff(s):
    s = re.sub(r"\\f[BIRP]", "", s)
    return s.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")


def man_items(roff, section):
    """The tagged paragraphs (.TP) of one section of a man page: [(tag, text joined by spaces)],
    and the text of its paragraphs after them (.PP)."""
    lines = roff.splitlines()
    start = lines.index(".SH " + section) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(".SH "))
    items, notes, where = [], [], None
    i = start
    while i < end:
        line = lines[i]
        if line == ".TP":
            items.append([unroff(lines[i + 1]), ""])
            where = "item"
            i += 2
            continue
        if line == ".PP":
            where = "notes"
        elif where == "item":
            items[-1][1] = (items[-1][1] + " " + unroff(line)).strip()
        elif where == "notes":
            notes.append(unroff(line))
        i += 1
    return [(t, d) for t, d in items], " ".join(notes)


def render_warnings(path):
    """What man --warnings says about a page (nothing, for a clean page)."""
    r = run(["man", "--warnings", "-l", path], env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
    return r.stderr.strip() if r.returncode == 0 else "exit %d: %s" % (r.returncode, r.stderr.strip())


def read_gz(path):
    with gzip.open(path, "rt") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------


def test_changelog_version_is_version():
    assert changelog_version() == VERSION, (changelog_version(), VERSION)


def test_build_depends_are_the_makefiles():
    # the Makefile names the packages; debian/control's Build-Depends must be the same build set
    r = run(["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "print-build-packages"],
            input="print-build-packages:\n\t@echo $(BUILD_PACKAGES)\n")
    assert r.returncode == 0, r.stderr
    makefile = set(r.stdout.split()) - {"build-essential"}  # implied by every Debian build
    control = open(os.path.join(TOP, "debian", "control")).read()
    field = re.search(r"^Build-Depends:(.*?)^\S", control, re.M | re.S).group(1)
    names = {re.sub(r"\s*\(.*\)", "", d).strip() for d in field.split(",") if d.strip()}
    assert names - {"debhelper-compat"} == makefile, names ^ makefile


def test_deb_builds():
    r = run(["make", "--no-print-directory", "deb"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    debs = [f for f in os.listdir(os.path.join(TOP, "build")) if re.fullmatch(r"tally_%s_[a-z0-9]+\.deb" % re.escape(VERSION), f)]
    assert len(debs) == 1, debs
    global DEB
    DEB = os.path.join(TOP, "build", debs[0])
    r = run(["dpkg-deb", "-x", DEB, ROOT])
    assert r.returncode == 0, r.stderr
    r = run(["dpkg-deb", "-e", DEB, os.path.join(SCRATCH, "DEBIAN")])
    assert r.returncode == 0, r.stderr
    # the package build ran in a copy: the tree's own build/ is still there
    assert os.path.exists(os.path.join(TOP, "build", "tallyd"))


def test_lintian_clean():
    r = run(["lintian", "--fail-on", "error,warning", "-E", "-L", ">=warning", DEB])
    shown = [l for l in r.stdout.splitlines() if re.match(r"^[EW]: ", l)]
    assert r.returncode == 0 and not shown, r.stdout + r.stderr
    # each override says why: a comment right above it
    path = os.path.join(TOP, "debian", "tally.lintian-overrides")
    lines = open(path).read().splitlines() if os.path.exists(path) else []
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith("#"):
            assert i > 0 and lines[i - 1].startswith("#"), "override without a reason: " + line


def test_contents():
    for f in ["usr/sbin/tallyd", "usr/bin/tally", "usr/share/man/man8/tallyd.8.gz", "usr/share/man/man1/tally.1.gz",
              "etc/tally/tallyd.conf", "lib/systemd/system/tallyd.service", "usr/share/doc/tally/copyright",
              "etc/logrotate.d/tally"]:
        assert os.path.exists(os.path.join(ROOT, f)), f
    conffiles = open(os.path.join(SCRATCH, "DEBIAN", "conffiles")).read().split()
    assert sorted(conffiles) == ["/etc/logrotate.d/tally", "/etc/tally/tallyd.conf"], conffiles
    # the access log is rotated by reloading tallyd (it reopens the file), not by copytruncate
    rotate = open(os.path.join(ROOT, "etc/logrotate.d/tally")).read()
    assert "systemctl reload tallyd" in rotate and "copytruncate" not in rotate, rotate
    control = open(os.path.join(SCRATCH, "DEBIAN", "control")).read()
    depends = re.search(r"^Depends: (.*)$", control, re.M).group(1)
    for bad in ["postgresql", "clang", "chromium", "build-essential", "-dev", "python", "nodejs", "lintian"]:
        assert bad not in depends, (bad, depends)
    for lib in ["libc6", "liblmdb0", "libpq5", "libsystemd0", "adduser"]:
        assert lib in depends, (lib, depends)


def test_maintainer_scripts():
    postinst = open(os.path.join(SCRATCH, "DEBIAN", "postinst")).read()
    assert re.search(r"adduser --system\b.*\n?.*\btally\b", postinst), postinst
    postrm = open(os.path.join(SCRATCH, "DEBIAN", "postrm")).read()
    purge = re.search(r'if \[ "\$1" = "purge" \]; then\n(.*?)\nfi', postrm, re.S).group(1)
    assert "rm -rf /etc/tally" in purge, purge
    for never in ["deluser", "userdel", "/var/lib/tally"]:
        assert never not in postrm.replace("# ", "").split("set -e", 1)[1], never


def test_versions_are_the_changelogs():
    v = changelog_version()
    for prog, path in [("tallyd", "usr/sbin/tallyd"), ("tally", "usr/bin/tally")]:
        r = run([os.path.join(ROOT, path), "--version"])
        assert r.returncode == 0 and r.stdout == "%s %s\n" % (prog, v), (r.stdout, v)


def test_man_pages_render_without_warnings():
    for page in ["usr/share/man/man8/tallyd.8.gz", "usr/share/man/man1/tally.1.gz"]:
        warnings = render_warnings(os.path.join(ROOT, page))
        assert warnings == "", (page, warnings)
        roff = read_gz(os.path.join(ROOT, page))
        # flags are written \-\-flag (searchable hyphens), never a bare -- groff would typeset
        body = "\n".join(l for l in roff.splitlines() if not l.startswith('.\\"'))
        assert not re.search(r"(?<!\\)--", body), re.search(r".*(?<!\\)--.*", body).group(0)


def test_tallyd_man_page_is_its_help():
    text = run([os.path.join(ROOT, "usr/sbin/tallyd"), "--help"]).stdout
    want, want_notes = help_items(text)
    got, got_notes = man_items(read_gz(os.path.join(ROOT, "usr/share/man/man8/tallyd.8.gz")), "OPTIONS")
    assert len(want) > 40, len(want)
    assert got == want, [(g, w) for g, w in zip(got, want) if g != w][:3] or (len(got), len(want))
    assert got_notes == want_notes, (got_notes, want_notes)


def test_tally_man_page_is_its_help():
    text = run([os.path.join(ROOT, "usr/bin/tally"), "--help"]).stdout
    roff = read_gz(os.path.join(ROOT, "usr/share/man/man1/tally.1.gz"))
    items, notes = man_items(roff, "COMMANDS")
    commands = re.findall(r"^tally ([a-z-]+)", text, re.M)
    assert [t.split()[1] for t, _ in items] == commands, (items, commands)
    flat = lambda s: " ".join(s.split())
    # every word of --help after its first line, in order, is the section's
    want = flat("\n".join(l for l in text.splitlines()[1:]))
    got = flat(" ".join(t + " " + d for t, d in items) + " " + notes)
    assert got == want, (got[:300], want[:300])


def test_config_lists_every_flag():
    text = run([os.path.join(ROOT, "usr/sbin/tallyd"), "--help"]).stdout
    conf = open(os.path.join(ROOT, "etc/tally/tallyd.conf")).read()
    blocks = {}
    for block in conf.split("\n\n")[1:]:
        m = re.match(r"# (--[a-z0-9-]+)", block)
        assert m, block
        blocks[m.group(1)] = block
    flags = []
    for head, desc in help_items(text)[0]:
        flag = head.split()[0]
        if flag in NOT_IN_FILE:
            assert flag not in blocks, flag
            continue
        flags.append(flag)
        assert flag in blocks, flag
        block = blocks[flag]
        reloads = desc.endswith("(reloads on SIGHUP)")
        assert ("reloads on SIGHUP" in block) == reloads, block
        assert ("needs a restart" in block) != reloads, block
        # a table default: the file's and --help's (which appends it) are the same
        d = re.search(r"\n#   default ([^;\n]+);", block)
        if d:
            assert re.search(r"\(default %s\)( \(reloads on SIGHUP\))?$" % re.escape(d.group(1)), desc), (flag, desc)
            assert "\n#%s = %s" % (flag[2:], d.group(1)) in block, (flag, block)
    assert sorted(flags) == sorted(blocks), set(blocks) ^ set(flags)
    # the only setting made: the data directory of the unit's StateDirectory
    active = [l for l in conf.splitlines() if l and not l.startswith("#")]
    assert active == ["data = /var/lib/tally"], active


def test_packaged_tallyd_starts_from_packaged_config():
    data = os.path.join(SCRATCH, "data")
    conf = os.path.join(ROOT, "etc/tally/tallyd.conf")
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_JWT_SECRET", "NOTIFY_SOCKET")}
    p = subprocess.Popen([os.path.join(ROOT, "usr/sbin/tallyd"), "--config", conf, "--data", data,
                          "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        line = p.stdout.readline()
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        assert m, (line, p.poll())
        url = m.group(1)
        req = urllib.request.Request(url + "/v1/items/pkg-test/reaction", method="PUT",
                                     data=b'{"reaction":"like"}',
                                     headers={"Content-Type": "application/json", "X-User-Id": "u1"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status in (200, 201), r.status
        with urllib.request.urlopen(url + "/v1/items/pkg-test", timeout=10) as r:
            body = json.load(r)
        assert body["counts"]["like"] == 1, body
        assert os.listdir(data), "nothing written to the test's data directory"
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        err = p.stderr.read()
    assert rc == 0, (rc, err[-2000:])


def unit_text():
    return open(os.path.join(ROOT, "lib/systemd/system/tallyd.service")).read()


def test_unit_settings():
    unit = unit_text()
    settings = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            settings.setdefault(k, []).append(v)
    one = lambda k: settings.get(k, [None])[-1]
    assert one("Type") == "notify"
    assert one("ExecStart") == "/usr/sbin/tallyd --config /etc/tally/tallyd.conf"
    assert one("ExecReload") == "/bin/kill -HUP $MAINPID"
    assert one("StateDirectory") == "tally"
    assert one("User") == "tally"
    assert one("Restart") == "on-failure"
    assert "DynamicUser" not in settings and "PrivateNetwork" not in settings
    assert one("CapabilityBoundingSet") == ""
    assert one("SystemCallErrorNumber") == "EPERM"
    help_text = run([os.path.join(ROOT, "usr/sbin/tallyd"), "--help"]).stdout
    max_conn = int(re.search(r"--max-connections N.*?\(default (\d+)\)", help_text, re.S).group(1))
    assert int(one("LimitNOFILE")) > max_conn + 1000, one("LimitNOFILE")


def test_unit_security_rating():
    path = os.path.join(ROOT, "lib/systemd/system/tallyd.service")
    # --threshold counts tenths (systemd 252: 0-100 for the 0.0-10.0 shown): 20 is 2.0
    r = run(["systemd-analyze", "security", "--offline=true", "--threshold=20", path])
    m = re.search(r"Overall exposure level for tallyd.service: ([0-9.]+)", r.stdout)
    assert m and float(m.group(1)) <= 2.0, r.stdout[-2000:] + r.stderr
    assert r.returncode == 0, r.stderr


def test_unit_verify():
    # verify checks that ExecStart= is executable and that man tallyd(8) exists: point both at the
    # extracted package (the unit itself names /usr/sbin, where nothing is installed here)
    d = os.path.join(SCRATCH, "unit")
    os.makedirs(d)
    with open(os.path.join(d, "tallyd.service"), "w") as f:
        f.write(unit_text().replace("/usr/sbin/tallyd", os.path.join(ROOT, "usr/sbin/tallyd")))
    r = run(["systemd-analyze", "verify", os.path.join(d, "tallyd.service")],
            env=dict(os.environ, MANPATH=os.path.join(ROOT, "usr/share/man")))
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def installed_files(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def test_make_install_layout():
    dest = os.path.join(SCRATCH, "install-usr")
    r = run(["make", "--no-print-directory", "install", "DESTDIR=" + dest, "PREFIX=/usr"])
    assert r.returncode == 0, r.stdout + r.stderr
    want = {f[:-3] if f.endswith(".gz") else f for f in installed_files(ROOT) 
            if not f.startswith(("usr/share/doc/", "usr/share/lintian/", "etc/logrotate.d/"))}
    assert installed_files(dest) == want, installed_files(dest) ^ want
    assert open(os.path.join(dest, "etc/tally/tallyd.conf")).read() == open(os.path.join(ROOT, "etc/tally/tallyd.conf")).read()
    # a second install keeps a changed configuration file
    with open(os.path.join(dest, "etc/tally/tallyd.conf"), "a") as f:
        f.write("listen = 127.0.0.1:9\n")
    r = run(["make", "--no-print-directory", "install", "DESTDIR=" + dest, "PREFIX=/usr"])
    assert r.returncode == 0 and "listen = 127.0.0.1:9" in open(os.path.join(dest, "etc/tally/tallyd.conf")).read()
    assert os.path.exists(os.path.join(dest, "etc/tally/tallyd.conf.new"))
    # the default prefix: everything under /usr/local, the unit pointing there
    dest = os.path.join(SCRATCH, "install-local")
    r = run(["make", "--no-print-directory", "install", "DESTDIR=" + dest])
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(f.startswith("usr/local/") for f in installed_files(dest)), installed_files(dest)
    unit = open(os.path.join(dest, "usr/local/lib/systemd/system/tallyd.service")).read()
    assert "ExecStart=/usr/local/sbin/tallyd --config /usr/local/etc/tally/tallyd.conf\n" in unit


TESTS = [v for k, v in list(globals().items()) if k.startswith("test_")]


def main():
    t0 = time.monotonic()
    passed = failed = 0
    try:
        for t in TESTS:
            t1 = time.monotonic()
            try:
                t()
            except Exception as e:  # noqa: BLE001 — a failed check of any kind is reported, then the next runs
                failed += 1
                print("FAIL %s: %s: %s" % (t.__name__, type(e).__name__, str(e)[:3000]), flush=True)
                if t is test_deb_builds:
                    failed += len(TESTS) - TESTS.index(t) - 1
                    print("(the remaining tests need the package)")
                    break
            else:
                passed += 1
                print("ok   %s (%.1fs)" % (t.__name__, time.monotonic() - t1), flush=True)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    print("package: %.0fs" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
