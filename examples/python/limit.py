"""Calls the rate limiter's Limit over Connect JSON with Python's standard
library alone, and handles a denial: run `make run`, then
`python3 examples/python/limit.py`."""
import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def limit(url, token, body):
    """POSTs one Limit call; returns the answer, or raises with the API's message."""
    req = urllib.request.Request(
        url + "/ratelimit.v1.RatelimitService/Limit",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as res:
            return json.load(res)
    except urllib.error.HTTPError as e:
        err = json.load(e)
        raise RuntimeError(f"{err['code']}: {err['message']}") from None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:7070")
    p.add_argument("--token", default=os.environ.get("UNKEY_TOKEN", ""))
    p.add_argument("--identifier", default="example_python")
    args = p.parse_args()
    # Two requests a minute; 64-bit numbers come back as strings.
    body = {"namespace": "examples", "identifier": args.identifier, "limit": 2, "duration": 60000}
    for i in range(1, 4):
        try:
            out = limit(args.url, args.token, body)
        except RuntimeError as e:
            print(f"request {i}: {e}", file=sys.stderr)
            sys.exit(1)
        if out["success"]:
            print(f"request {i}: passed, {out['remaining']} left")
        else:
            print(f"request {i}: denied, retry in {out['retryAfter']} ms")


if __name__ == "__main__":
    main()
