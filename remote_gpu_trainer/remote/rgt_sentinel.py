"""rgt's sentinel: watches one run on the box and sends one notification per event (docs/remote-ops.md §9.1).

Started detached beside the job wrapper (its own session, every descriptor redirected), so it outlives the
connection and rgt: nobody needs to be watching for a finished, dead or stalled run to be noticed.

    python3 rgt_sentinel.py CONFIG SECRET

CONFIG is the non-secret JSON rgt wrote into the run's control folder (paths, thresholds and the notification
bodies rgt rendered at launch); SECRET is the 0600 file holding the receiver's URL, streamed over the
transport's stdin. Only paths travel on the command line, so no process list shows the URL, and nothing this
program writes contains it. The secrets file is deleted when the watch ends (after finished or died): the URL
stays on the box no longer than it is needed.

Each poll reads the wrapper's control files (pid and its start time, exit_code, DONE), the log's mtime, the newest
checkpoint's mtime and the durable disk's use, writes a heartbeat, and sends what `decide` says is new: finished,
died, stalled or disk_full, each at most once, remembered in `sentinel.sent.json` so a restart never sends one
again. It exits after finished or died. It never stops or kills anything, and deletes nothing but its own
secrets file.

Bounded, whatever the receiver does: one delivery attempt lasts at most `attempt_s` (default ATTEMPT_S, a
SIGALRM deadline from connect to the last header byte, on top of the socket timeout), reads at most
MAX_ANSWER_BYTES of the answer (the status line and headers; the body is never read), follows no redirect (a
3xx is a failed attempt, never a delivery), and any failure at all (no answer, not HTTP, a status that is not
2xx, a URL http.client refuses, the deadline) is one failed attempt. After the retries of `retry_delays_s`
(default RETRY_DELAYS_S) the event is recorded as "gave up", so the watch always ends after finished or died.

Standard library only, Python 3.8 syntax: it runs under whatever interpreter the box has.
"""

import base64
import fnmatch
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

VERSION = 1
DETAIL = "@@RGT_DETAIL@@"  # where the event's detail goes in the bodies rgt rendered
RETRY_DELAYS_S = (2, 5, 15, 30, 60, 120)  # a failing receiver: this many retries, then give up on that event
ATTEMPT_S = 30  # one delivery attempt, connect to the answer's last header byte, at most this long
MAX_ATTEMPT_S = 300  # the largest attempt_s a config may ask for
MAX_RETRIES = 10  # the most retries a config may ask for ...
MAX_RETRY_S = 3600  # ... each waiting at most this long: an event is given up within 10 h + 11 attempts
MAX_ANSWER_BYTES = 64 << 10  # of any answer: the status line and headers (the body is never read)
MAX_WALK = 20000  # files looked at for the newest checkpoint: a huge result tree must not stall the poll
FINAL = ("finished", "died")


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def write_atomic(path, text, mode=0o644):
    temp = path + ".tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def pid_state(ctl):
    """alive, gone or zombie: the recorded pid, guarded against reuse by its recorded start time (as rgt's
    liveness look does); None when the wrapper has not written its pid yet."""
    pid = read_text(os.path.join(ctl, "pid"))
    if not pid or not pid.isdigit():
        return None
    stat = read_text(f"/proc/{pid}/stat")
    if stat is None:
        return "gone"
    fields = stat.rsplit(")", 1)[-1].split()
    recorded = read_text(os.path.join(ctl, "pid_start"))
    if recorded and len(fields) > 19 and fields[19] != recorded:
        return "gone"
    return "zombie" if fields and fields[0] in ("Z", "X") else "alive"


def job_state(job):
    """A batch job on Slurm: alive while squeue lists it, gone once it no longer does; None when squeue
    cannot be asked (unknown is never taken for gone)."""
    try:
        answer = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if answer.returncode != 0:
        return None
    return "alive" if answer.stdout.strip() else "gone"


def newest_checkpoint(root, globs):
    newest, seen = None, 0
    for folder, _, names in os.walk(root):
        for name in names:
            seen += 1
            if seen > MAX_WALK:
                return newest
            if any(fnmatch.fnmatch(name, pattern) for pattern in globs):
                stamp = mtime(os.path.join(folder, name))
                if stamp is not None and (newest is None or stamp > newest):
                    newest = stamp
    return newest


def disk_percent(path):
    """Use of the file system holding `path` (its nearest existing folder), as df computes it."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    used = (info.f_blocks - info.f_bfree) * info.f_frsize
    usable = used + info.f_bavail * info.f_frsize
    return 100.0 * used / usable if usable > 0 else None


def observe(config, now):
    """The facts `decide` judges, read from the box."""
    ctl = config["ctl"]
    job = config.get("slurm_job")
    process = job_state(job) if job else pid_state(ctl)
    exit_code = read_text(os.path.join(ctl, "exit_code"))
    return {
        "now": now,
        "process": process,
        "exit_code": int(exit_code) if exit_code and exit_code.lstrip("-").isdigit() else None,
        "done": os.path.exists(os.path.join(ctl, "DONE")),
        "log_mtime": mtime(config["log"]),
        "ckpt_mtime": newest_checkpoint(config["root"], config.get("checkpoint_globs", ["*.pt"])),
        "disk_percent": disk_percent(config["durable"]),
    }


def decide(facts, config, sent):
    """The events these facts show that were not sent yet, as (event, detail), final events last.

    finished: the wrapper is gone, exit 0 and DONE. died: gone with a nonzero exit code, exit 0 without DONE,
    or no exit code at all (killed -9, the box rebooted). stalled: alive, the log silent longer than
    stall_after, no checkpoint within twice that, and launched longer ago than stall_after. disk_full: the
    durable disk at or above the threshold. A process state that could not be read decides nothing."""
    events = []
    percent = facts.get("disk_percent")
    if percent is not None and percent >= config.get("disk_full_percent", 95) and "disk_full" not in sent:
        events.append(("disk_full", f"{config['durable']} at {int(percent)} % used"))
    process = facts.get("process")
    if process == "alive":
        now, stall = facts["now"], float(config["stall_after"])
        log_age = now - facts["log_mtime"] if facts.get("log_mtime") is not None else None
        ckpt_age = now - facts["ckpt_mtime"] if facts.get("ckpt_mtime") is not None else None
        silent = log_age is None or log_age > stall
        stale = ckpt_age is None or ckpt_age > 2 * stall
        if silent and stale and now - float(config["started_at"]) > stall and "stalled" not in sent:
            events.append(("stalled", f"log last written {age(log_age)}, newest checkpoint {age(ckpt_age)}"))
    elif process in ("gone", "zombie"):
        code = facts.get("exit_code")
        if code == 0 and facts.get("done"):
            event, detail = "finished", "exit 0"
        elif code == 0:
            event, detail = "died", "incomplete: exit 0 but required files missing"
        elif code is not None:
            event, detail = "died", exit_detail(code)
        else:
            event, detail = "died", "no exit code: the job was killed or the box rebooted"
        if not any(name in sent for name in FINAL):
            events.append((event, detail))
    return events


def exit_detail(code):
    if code == 137:
        return "exit 137 (SIGKILL: out of memory or killed)"
    if code == 143:
        return "exit 143 (SIGTERM: stopped or preempted)"
    return f"exit {code}"


def age(seconds):
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


class Sentinel:
    def __init__(self, config_path, secret_path):
        self.config_path = config_path
        self.secret_path = secret_path
        self.config = json.loads(read_text(config_path) or "{}")
        if self.config.get("version") != VERSION:
            raise SystemExit(f"sentinel: config version {self.config.get('version')!r} is not {VERSION}")
        ctl = self.config["ctl"]
        self.paths = {name: os.path.join(ctl, "sentinel." + name)
                      for name in ("heartbeat", "sent.json", "log", "exited", "pid")}
        self.sent = json.loads(read_text(self.paths["sent.json"]) or "{}")
        self.attempt_s, self.retry_delays = bounds(self.config)
        self.process = "unknown"
        self.url = read_text(secret_path) or ""
        problem = url_problem(self.url)
        if problem and not self.ended():
            # a restart after the end needs no URL (its secrets file is already gone); any other start does
            self.url = ""  # never logged: the URL itself may be what is wrong
            self.log(f"the secrets file {problem}: exiting")
            self.forget_secret()
            raise SystemExit(f"sentinel: the secrets file {problem}")

    def ended(self):
        """The final event this launch already sent (finished or died), or None."""
        return next((event for event in FINAL if event in self.sent), None)

    def forget_secret(self):
        """Delete the secrets file once the watch is over, unless the run was launched again meanwhile (that
        launch streamed its own URL into the same file)."""
        if self.replaced():
            return
        try:
            os.remove(self.secret_path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.log(f"could not delete the secrets file: {type(exc).__name__}")
            return
        self.log("deleted the secrets file")

    def log(self, message):
        """A short record of what the sentinel did; the URL never appears in it."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.url:  # str.replace with an empty needle would splice '<url>' between every character
            message = message.replace(self.url, "<url>")
        line = f"{stamp} {message}\n"
        with open(self.paths["log"], "a", encoding="utf-8") as handle:
            handle.write(line)

    def replaced(self):
        """The run was launched again (its control folder reset) or removed: this sentinel's job is over."""
        current = read_text(self.config_path)
        try:
            return current is None or json.loads(current).get("started_at") != self.config["started_at"]
        except ValueError:
            return True

    def run(self):
        write_atomic(self.paths["pid"], f"{os.getpid()}\n")
        self.log(f"watching run {self.config['run']} (poll {self.config['poll_s']:g} s)")
        ended = self.ended()
        if ended:  # restarted after the run's end was already sent: nothing is sent twice
            write_atomic(self.paths["exited"], ended + "\n")
            self.log(f"{ended} was already sent: exiting")
            self.forget_secret()
            return
        while True:
            if self.replaced():
                self.log("the run's control folder was reset: exiting")
                return
            try:
                self.tick()
            except Exception as exc:  # one bad poll never ends the watch
                self.log(f"poll failed: {type(exc).__name__}")
            final = self.ended()  # what was sent, even when recording it failed: the end is never sent twice
            if final is not None:
                write_atomic(self.paths["exited"], final + "\n")
                self.forget_secret()
                self.log(f"exiting after {final}")
                return
            time.sleep(float(self.config["poll_s"]))

    def tick(self):
        now = time.time()
        facts = observe(self.config, now)
        self.process = facts.get("process") or "unknown"
        self.beat()
        for event, detail in decide(facts, self.config, self.sent):
            self.notify(event, detail)

    def beat(self):
        write_atomic(self.paths["heartbeat"], f"{int(time.time())} {self.process}\n")

    def notify(self, event, detail):
        """One event, tried at most 1 + len(retry_delays) times; any failure of an attempt is a failed attempt,
        and after the last the event is recorded as "gave up"."""
        payload = self.config["payloads"][event]
        body = render(base64.b64decode(payload["body"]), detail, self.config["kind"])
        attempts, outcome = 0, "gave up"
        for delay in (0,) + self.retry_delays:
            if delay:
                time.sleep(delay)
                self.beat()  # retrying is working: the sentinel does not read as silent meanwhile
            attempts += 1
            try:
                status, error = post(self.url, body, payload["headers"], self.attempt_s)
            except Exception as exc:  # the deadline firing on the way out of post: still one failed attempt
                status, error = None, type(exc).__name__
            if status is not None and 200 <= status < 300:
                outcome = "sent"
                break
            self.log(f"{event}: the receiver answered {error} (attempt {attempts})")
        self.sent[event] = {"at": int(time.time()), "outcome": outcome, "attempts": attempts, "detail": detail}
        write_atomic(self.paths["sent.json"], json.dumps(self.sent, sort_keys=True) + "\n")
        self.log(f"{event} ({detail}): {outcome} after {attempts} attempt(s)")


def render(body, detail, kind):
    """The detail into a body rendered at launch: JSON-escaped inside JSON bodies, as text in plain ones."""
    text = json.dumps(detail)[1:-1] if kind != "ntfy" else detail
    return body.replace(DETAIL.encode("ascii"), text.encode("utf-8"))


def bounds(config):
    """(attempt_s, retry_delays) from the config, clamped to MAX_ATTEMPT_S, MAX_RETRIES and MAX_RETRY_S
    (rgt refuses more when rgt.toml is read; a config written otherwise is held to them too)."""
    try:
        attempt = min(max(float(config.get("attempt_s", ATTEMPT_S)), 0.1), MAX_ATTEMPT_S)
        delays = tuple(min(max(float(d), 0.0), MAX_RETRY_S) for d in config.get("retry_delays_s", RETRY_DELAYS_S))
    except (TypeError, ValueError):
        return ATTEMPT_S, RETRY_DELAYS_S
    return attempt, delays[:MAX_RETRIES]


def url_problem(url):
    """Why `url` cannot be a receiver's URL (None when it can): it must be http:// or https:// with a host, and
    hold no whitespace or control character (http.client refuses those on every attempt). rgt checks the same
    when it reads webhook_file."""
    if not url.startswith(("http://", "https://")):
        return "holds no http(s) URL"
    if any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in url):
        return "holds a URL with a space or a control character"
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:
        host = None
    return None if host else "holds a URL with no host"


class AnswerTooLong(Exception):
    pass


class AttemptExpired(Exception):
    pass


class _Capped(io.RawIOBase):
    """An answer's bytes, at most MAX_ANSWER_BYTES of them: a receiver that talks on fills no memory."""

    def __init__(self, raw):
        super().__init__()
        self.raw, self.left = raw, MAX_ANSWER_BYTES

    def readable(self):
        return True

    def readinto(self, buffer):
        if self.left <= 0:
            raise AnswerTooLong(f"an answer longer than {MAX_ANSWER_BYTES} bytes")
        count = self.raw.readinto(memoryview(buffer)[:self.left])
        self.left -= count or 0
        return count

    def close(self):
        if not self.closed:
            self.raw.close()
        super().close()


_OPENER = []  # type: list


def _opener():
    """The urllib opener that caps answers and follows no redirect, built on the first delivery: rgt itself imports
    this module for its limits (config/notify.py, on every project load), and the HTTP stack it needs (http.client,
    urllib.request, ssl, email) was ~6 ms of every `rgt --report` (docs/architecture.md §5)."""
    if _OPENER:
        return _OPENER[0]
    import http.client
    import urllib.request

    class _CappedResponse(http.client.HTTPResponse):
        def __init__(self, sock, *args, **kwargs):
            super().__init__(sock, *args, **kwargs)
            if isinstance(self.fp, io.BufferedReader):
                self.fp = io.BufferedReader(_Capped(self.fp.detach()))

    capped = {}  # each connection class, capped once

    class _Capping:
        """A urllib handler whose connections read answers through _CappedResponse."""

        def do_open(self, http_class, req, **kwargs):
            if http_class not in capped:
                capped[http_class] = type("Capped" + http_class.__name__, (http_class,),
                                          {"response_class": _CappedResponse})
            return super().do_open(capped[http_class], req, **kwargs)

    class _HTTP(_Capping, urllib.request.HTTPHandler):
        pass

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            return None  # a redirect is not a delivery: the 3xx itself is the answer, a failed attempt

    handlers = [_NoRedirect, _HTTP]
    if hasattr(urllib.request, "HTTPSHandler"):  # an interpreter built without ssl has none
        class _HTTPS(_Capping, urllib.request.HTTPSHandler):
            pass
        handlers.append(_HTTPS)
    _OPENER.append(urllib.request.build_opener(*handlers))
    return _OPENER[0]

_armed = [False]


def _expire(signum, frame):
    if _armed[0]:
        _armed[0] = False
        raise AttemptExpired()


def post(url, body, headers, attempt_s=ATTEMPT_S):
    """(HTTP status, None) or (status or None, a short reason without the URL). Never raises for what the
    receiver or the URL does, and returns within about `attempt_s` (a SIGALRM deadline in the main thread)."""
    import http.client  # loaded with the opener (_opener)

    alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if alarm:
        signal.signal(signal.SIGALRM, _expire)
        _armed[0] = True
        signal.setitimer(signal.ITIMER_REAL, attempt_s)
    try:
        return _post(url, body, headers, attempt_s)
    # the deadline, or the socket's own timeout on a silent receiver (socket.timeout: not TimeoutError before 3.10)
    except (AttemptExpired, socket.timeout):  # noqa: UP041
        return None, f"no full answer within {attempt_s:g} s"
    except AnswerTooLong as exc:
        return None, str(exc)
    except http.client.HTTPException as exc:  # BadStatusLine, RemoteDisconnected, InvalidURL, LineTooLong ...
        return None, f"no HTTP answer ({type(exc).__name__})"
    except Exception as exc:  # anything else is one failed attempt too, named by its type, never its text
        return None, type(exc).__name__
    finally:
        if alarm:
            _armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)


def _post(url, body, headers, attempt_s):
    import http.client
    import urllib.error
    import urllib.request

    opener = _opener()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with opener.open(request, timeout=attempt_s) as answer:
            return answer.status, None
    except urllib.error.HTTPError as exc:
        exc.close()
        if 300 <= exc.code < 400:
            return exc.code, f"HTTP {exc.code} (a redirect, not followed: not a delivery)"
        return exc.code, f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (AttemptExpired, AnswerTooLong, http.client.HTTPException, socket.timeout)):  # noqa: UP041
            raise reason from None
        return None, type(reason).__name__ if isinstance(reason, BaseException) else "unreachable"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: rgt_sentinel.py CONFIG SECRET\n")
        return 2
    Sentinel(argv[1], argv[2]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
