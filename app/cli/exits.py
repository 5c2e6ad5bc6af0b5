"""What each `rollscope` command's exit code means, shown at the end of its `--help` (as the
command's epilog: app/cli/__init__.py and app/cli/token.py register every command with
`epilog=exit_codes(name)`), so a script or a cron job can tell a rejected record from a database
that is down without reading stderr.

The codes every command shares come from `main` (app/cli/__init__.py): 2 for a usage error, a
setting or a database that cannot be used (no such database or role, a refused password, ...),
3 for a database still unreachable after `ROLLSCOPE_DB__RETRY_SECONDS` of retrying, 130 for
Ctrl-C, and 1 for an error nothing else names (one line; `--debug` shows the traceback).
"""
from __future__ import annotations

_DB = "3 the database stayed unreachable after retrying (ROLLSCOPE_DB__RETRY_SECONDS)"
_USAGE = "2 a usage error (an unknown option, a bad value)"
_USAGE_DB = "2 a usage error, a setting or a database that cannot be used (no such database or role, ...)"
_REST = "130 interrupted (Ctrl-C); 1 an unexpected error, said in one line"

# command (as typed: `token create`) → its own codes, in order; the shared ones are added by `exit_codes`
CODES: dict[str, list[str]] = {
    "ingest": ["0 every record was stored (or was already)",
               "1 a record or a file was rejected (each named on stderr and quarantined); the rest is stored",
               _USAGE_DB + ", or a tokenizer that cannot be read", _DB],
    "export": ["0 the file was written",
               "1 no such run, no samples to write, or a stored rollout that cannot be read back (named; "
               "nothing written)",
               _USAGE_DB + ", or the file cannot be written", _DB],
    "recheck": ["0 the run's rollouts were checked again",
                "1 a stored rollout that cannot be read back (named), or an unexpected error, said in one line",
                _USAGE_DB + ", a run with no stored rollouts, or a tokenizer that cannot be read", _DB],
    "quarantine": ["0 listed or cleared", _USAGE_DB, _DB],
    "worker": ["0 stopped by SIGTERM or Ctrl-C, or (--once) everything was read",
               "1 (--once) a file was left unread, each named on stderr with why",
               _USAGE_DB + ", an empty --spool value, a --spool folder that does not exist (without --create), "
                           "another worker holding the SQLite database, or a database that became unusable "
                           "while it ran",
               _DB + " when it starts (once running, it waits for the database as long as it takes)"],
    "link": ["0 the URL was printed (no database is touched)",
             _USAGE + ", or a ROLLSCOPE_URL / --base that is not an http(s) URL"],
    "token create": ["0 created; the token is the last line of stdout", _USAGE_DB + ", or an unknown scope", _DB],
    "token list": ["0 listed", _USAGE_DB, _DB],
    "token revoke": ["0 revoked", "1 no such token", _USAGE_DB + ", or a prefix shorter than 6 characters", _DB],
    "serve": ["0 stopped (Ctrl-C or SIGTERM)", "1 the server could not start (the port is taken, ...)",
              _USAGE_DB, _DB + " when it starts"],
    "demo": ["0 the demo run and its tokenizer were written", _USAGE + ", or a file that cannot be written"],
    "rebuild-analytics": ["0 rebuilt", _USAGE_DB, _DB],
    "db partition": ["0 every table is partitioned (now, or already)",
                     _USAGE_DB + ", a SQLite database (no partitions), or --partitions out of 2..1024", _DB],
    "schema": ["0 the schema was printed or written", "1 the file cannot be written", _USAGE],
    "mcp": ["0 the client closed stdio, or (--http) stopped by Ctrl-C or SIGTERM",
            "1 the first read failed (the server answered an error)",
            _USAGE_DB + ", a --url that is not an http(s) URL, or reading is locked and no read token was given "
                        "(or it was refused)", _DB + " when it starts"],
}
STOPS_CLEANLY = {"worker", "serve", "mcp"}  # Ctrl-C stops them as SIGTERM does: exit 0, not 130


def exit_codes(command: str) -> str:
    """The `Exit codes: 0 ...; 1 ...; 2 ...` paragraph of `command` (a key of CODES), with the
    codes every command shares (130, except for those Ctrl-C stops cleanly, and 1 when the command
names no 1 of its own)."""
    codes = list(CODES[command])
    if command not in STOPS_CLEANLY:
        codes.append(_REST if not any(c.startswith("1 ") for c in codes) else _REST.split("; ")[0])
    elif not any(c.startswith("1 ") for c in codes):
        codes.append(_REST.split("; ")[1])
    return "Exit codes: " + "; ".join(codes) + "."
