"""Fixtures for the Hayate interoperability suite.

Every test gets its own broker process on a free loopback port, started from the built
binary with a temporary configuration file. At teardown the broker is sent SIGTERM; the test
fails if the broker died early, exited non-zero, did not stop in time, or printed "panicked".
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "hayate"

STARTUP_TIMEOUT = 15.0
SHUTDOWN_TIMEOUT = 10.0
HARD_TEST_TIMEOUT = 120  # seconds; a last-resort bound on any one test, setup and teardown included


def broker_binary() -> Path:
    path = Path(os.environ.get("HAYATE_BIN", str(DEFAULT_BIN)))
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"hayate binary not found at {path}: run `cargo build -p hayate` or set HAYATE_BIN",
            pytrace=False,
        )
    return path


def _ports_below_the_ephemeral_range() -> list[int]:
    """Candidate ports for brokers under test, below the kernel's ephemeral range: a port the
    kernel hands out (bind to 0) and takes back can meanwhile become some client connection's
    source port, and the broker's bind then fails with "Address already in use"."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports = list(range(10000, max(low, 10001)))
    random.shuffle(ports)
    return ports


_CANDIDATE_PORTS = iter(_ports_below_the_ephemeral_range())


def free_port() -> int:
    """A loopback port nothing listens on now, from below the ephemeral range (shared by the
    test modules: `from conftest import free_port`)."""
    for port in _CANDIDATE_PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port left below the ephemeral range")


@dataclass
class Broker:
    host: str
    port: int
    process: subprocess.Popen
    log_path: Path
    config_path: Path

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _wait_listening(proc: subprocess.Popen, host: str, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"broker exited during startup with {proc.returncode}:\n{log_path.read_text(errors='replace')}",
                pytrace=False,
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"broker did not listen on {host}:{port} within {STARTUP_TIMEOUT}s", pytrace=False)


def _stop(broker: Broker) -> list[str]:
    """Stops the broker and returns the problems seen (empty when all is well)."""
    problems: list[str] = []
    proc = broker.process
    if proc.poll() is not None:
        problems.append(f"broker exited on its own during the test with status {proc.returncode}")
    else:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SHUTDOWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            problems.append(f"broker did not stop within {SHUTDOWN_TIMEOUT}s of SIGTERM")
        else:
            if proc.returncode != 0:
                problems.append(f"broker exited with status {proc.returncode} after SIGTERM")
    log = broker.log()
    if "panicked" in log:
        problems.append("broker printed 'panicked'")
    if problems:
        tail = "\n".join(log.splitlines()[-60:])
        problems.append(f"--- broker log (last 60 lines) ---\n{tail}")
    return problems


@pytest.fixture(autouse=True)
def _hard_timeout(request):
    """Fails (rather than hangs) any test that runs past HARD_TEST_TIMEOUT seconds."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} exceeded {HARD_TEST_TIMEOUT}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HARD_TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _health_problems(broker: Broker) -> list[str]:
    problems = []
    if broker.process.poll() is not None:
        problems.append(f"broker exited during the test with status {broker.process.returncode}")
    if "panicked" in broker.log():
        problems.append("broker printed 'panicked'")
    if problems:
        tail = "\n".join(broker.log().splitlines()[-60:])
        problems.append(f"--- broker log (last 60 lines) ---\n{tail}")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fails the test itself (not only its teardown) when a broker it used crashed or panicked."""
    result = yield
    problems: list[str] = []
    for broker in getattr(item, "_hayate_brokers", []):
        problems.extend(_health_problems(broker))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    return result


@pytest.fixture
def broker_factory(request, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Returns start(config_toml: str = "") -> Broker.

    After the test body, the test fails if a broker died or printed "panicked"; at teardown each
    broker gets SIGTERM and must exit 0 within SHUTDOWN_TIMEOUT without panicking.
    """
    binary = broker_binary()
    started: list[Broker] = []
    request.node._hayate_brokers = started

    def start(config: str = "") -> Broker:
        n = len(started)
        port = free_port()
        config_path = tmp_path / f"hayate-{n}.toml"
        config_path.write_text(config)
        log_path = tmp_path / f"hayate-{n}.log"
        log_file = open(log_path, "wb")
        proc = subprocess.Popen(
            [
                str(binary),
                "serve",
                "--config",
                str(config_path),
                "--listen",
                f"127.0.0.1:{port}",
                "--threads",
                "2",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_BACKTRACE": "1", "NO_COLOR": "1"},
        )
        log_file.close()
        broker = Broker("127.0.0.1", port, proc, log_path, config_path)
        started.append(broker)
        _wait_listening(proc, broker.host, port, log_path)
        return broker

    yield start

    problems: list[str] = []
    for broker in started:
        problems.extend(_stop(broker))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def broker(broker_factory) -> Broker:
    """A broker with the default configuration."""
    return broker_factory("")
