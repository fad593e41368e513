#!/bin/bash
# costscale-worker-bootstrap.sh: from a stock Linux image to a serving costscale worker (issue #38).
#
#   costscale-worker-bootstrap.sh worker ARGS...   install if needed, start `costscale worker ARGS`
#   costscale-worker-bootstrap.sh --bake           install only (an image recipe: Image Builder, Packer)
#   costscale-worker-bootstrap.sh --plan           print what it would choose, change nothing
#
# Input (the launch's user data exports it): COSTSCALE_VERSION (the daemon's exact version),
# COSTSCALE_ONNXRUNTIME (the pinned range, e.g. ">=1.31.1,<1.32"), COSTSCALE_WHEELHOUSE
# (s3://BUCKET/PREFIX from `costscale bundle`, optional), PIP_INDEX_URL (default PyPI), and the
# worker's COSTSCALE_* settings (instance id and type, cluster, token or its SSM parameter).
# Steps: Python 3.11+ (found, else dnf/apt); a venv in /opt/costscale/venv with costscale==VERSION
# and the ONNX Runtime build of this hardware (NVIDIA GPU: onnxruntime-gpu of the same range; Neuron
# or none: the CPU build, the Neuron SDK comes with the image); from the wheelhouse when one is set,
# each wheel checked against the manifest's sha256, else from the index when it serves costscale==VERSION;
# s3:// models fetched; then the systemd unit costscale-worker.service (Restart=on-failure,
# journald), or, where systemd is not PID 1 (a container), the worker in the foreground.
# S3 is read with the instance profile's credentials from IMDSv2 and a SigV4-signed GET (Python's
# standard library: nothing is installed yet, no aws CLI assumed); nothing secret is printed.
# Test-only overrides (never set on EC2): COSTSCALE_TEST_IMDS, COSTSCALE_TEST_S3_ENDPOINT,
# COSTSCALE_TEST_ROOT (a prefix for /opt, /etc), COSTSCALE_TEST_SYSROOT (where /dev, /sys are
# read), COSTSCALE_TEST_PYTHON. COSTSCALE_FOREGROUND=1 runs the worker in the foreground anyway.
set -euo pipefail
umask 077

MODE=run
case "${1:-}" in
  --bake) MODE=bake; shift ;;
  --plan) MODE=plan; shift ;;
  worker) shift ;;
  *) echo "usage: $0 worker ARGS... | --bake | --plan" >&2; exit 2 ;;
esac

ROOT=${COSTSCALE_TEST_ROOT:-}
SYSROOT=${COSTSCALE_TEST_SYSROOT:-}
PREFIX=$ROOT/opt/costscale
VENV=$PREFIX/venv
ETC=$ROOT/etc/costscale
UNIT_DIR=$ROOT/etc/systemd/system
HELPER=$PREFIX/lib/bootstrap_helper.py
VERSION=${COSTSCALE_VERSION:-}
ORT_SPEC=${COSTSCALE_ONNXRUNTIME:-}
WHEELHOUSE=${COSTSCALE_WHEELHOUSE:-}
INDEX=${PIP_INDEX_URL:-https://pypi.org/simple}

log() { echo "costscale-bootstrap: $*" >&2; }
die() { log "error: $*"; exit 1; }
[ -n "$VERSION" ] || { log "error: COSTSCALE_VERSION is not set (the launch's user data sets it)"; exit 2; }
[ -n "$ORT_SPEC" ] || { log "error: COSTSCALE_ONNXRUNTIME is not set (the launch's user data sets it)"; exit 2; }

python_ok() { "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

find_python() {   # prints a Python 3.11+ that can make a venv, or nothing
  if [ -n "${COSTSCALE_TEST_PYTHON:-}" ]; then echo "$COSTSCALE_TEST_PYTHON"; return; fi
  local c
  for c in python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && python_ok "$(command -v "$c")"; then command -v "$c"; return; fi
  done
}

install_python() {   # Amazon Linux 2023: python3.11 from dnf; Debian/Ubuntu: python3(.11)-venv from apt
  if command -v dnf >/dev/null; then
    dnf install -y -q python3.11 python3.11-pip >&2
  elif command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q python3-venv >&2 || apt-get install -y -q python3.11 python3.11-venv >&2
  else
    die "no Python 3.11+ and neither dnf nor apt-get to install one"
  fi
}

hardware() {   # gpu: an NVIDIA PCI device (vendor 0x10de) or its device node; neuron: /dev/neuron*; else cpu
  local v
  for v in "$SYSROOT"/sys/bus/pci/devices/*/vendor; do
    [ -r "$v" ] && [ "$(cat "$v")" = "0x10de" ] && { echo gpu; return; }
  done
  [ -e "$SYSROOT/dev/nvidia0" ] && { echo gpu; return; }
  compgen -G "$SYSROOT/dev/neuron*" >/dev/null && { echo neuron; return; }
  echo cpu
}

write_helper() {   # the stdlib Python the steps below call (S3 over SigV4, the index probe, the env file)
  install -d -m 0700 "$(dirname "$HELPER")"
  cat > "$HELPER" <<'PYHELPER'
"""costscale bootstrap helper: Python's standard library only (it runs before anything is installed).

probe INDEX VERSION          exit 0 when the PEP 503 index serves costscale==VERSION
wheelhouse S3URI TARGET DIR  the target's wheels from the wheelhouse manifest, each sha256-checked
object S3URI FILE            one S3 object
envfile FILE                 the worker's COSTSCALE_* and AWS region settings, 0600, systemd syntax

S3 is read with the instance profile: IMDSv2 gives temporary credentials and the region
(docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html), each GET is signed
with Signature Version 4 (docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html,
the empty body's SHA-256 as the payload hash of a GET). Credentials are never printed."""
import datetime
import hashlib
import hmac
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

IMDS = (os.environ.get("COSTSCALE_TEST_IMDS") or "http://169.254.169.254").rstrip("/")
S3_ENDPOINT = (os.environ.get("COSTSCALE_TEST_S3_ENDPOINT") or "").rstrip("/")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()   # a GET's payload hash
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # IMDS is never proxied
OWN = ("COSTSCALE_TEST_", "COSTSCALE_VERSION", "COSTSCALE_ONNXRUNTIME", "COSTSCALE_WHEELHOUSE", "COSTSCALE_FOREGROUND")


def imds(path, token="", method="GET"):
    headers = {"X-aws-ec2-metadata-token-ttl-seconds": "300"} if method == "PUT" else {"X-aws-ec2-metadata-token": token}
    with DIRECT.open(urllib.request.Request(f"{IMDS}/latest/{path}", method=method, headers=headers), timeout=5) as r:
        return r.read().decode()


def instance_credentials():
    """(access key, secret key, session token, region) of the instance profile, from IMDSv2."""
    token = imds("api/token", method="PUT")
    role = imds("meta-data/iam/security-credentials/", token).split()[0]
    doc = json.loads(imds(f"meta-data/iam/security-credentials/{role}", token))
    return doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token", ""), imds("meta-data/placement/region", token)


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_headers(url, region, access_key, secret_key, session_token, now):
    """The headers of a SigV4-signed S3 GET of ``url`` (no query string) at ``now`` (UTC)."""
    parts = urllib.parse.urlsplit(url)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": parts.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date}
    if session_token:
        headers["x-amz-security-token"] = session_token
    names = sorted(headers)
    canonical = "\n".join(["GET", parts.path or "/", "", *(f"{n}:{headers[n]}" for n in names), "",
                           ";".join(names), EMPTY_SHA256])
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret_key).encode(), amz_date[:8]), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return headers


def object_url(bucket, key, region):
    path = urllib.parse.quote(key, safe="/-_.~")
    if S3_ENDPOINT:
        return f"{S3_ENDPOINT}/{bucket}/{path}"
    if "." in bucket:   # a dotted name fails the wildcard certificate of virtual-hosted style
        return f"https://s3.{region}.amazonaws.com/{bucket}/{path}"
    return f"https://{bucket}.s3.{region}.amazonaws.com/{path}"


def split_uri(uri):
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        sys.exit(f"costscale-bootstrap: error: {uri!r} is not s3://BUCKET/KEY")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key.strip("/")


class S3:
    def __init__(self):
        self.creds = instance_credentials()

    def get(self, bucket, key, dest=None, sha256=None):
        access, secret, token, region = self.creds
        url = object_url(bucket, key, region)
        now = datetime.datetime.now(datetime.timezone.utc)
        req = urllib.request.Request(url, headers=sigv4_headers(url, region, access, secret, token, now))
        opener = DIRECT if S3_ENDPOINT else urllib.request.build_opener()
        try:
            resp = opener.open(req, timeout=60)
        except urllib.error.HTTPError as exc:
            sys.exit(f"costscale-bootstrap: error: s3://{bucket}/{key}: HTTP {exc.code} (the instance profile "
                     "needs s3:GetObject on it)")
        digest, chunks = hashlib.sha256(), []
        with resp:
            out = open(dest + ".part", "wb") if dest else None
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk) if out else chunks.append(chunk)
        if sha256 and digest.hexdigest() != sha256:
            sys.exit(f"costscale-bootstrap: error: s3://{bucket}/{key}: sha256 {digest.hexdigest()} is not the "
                     f"manifest's {sha256}")
        if out:
            out.close()
            os.replace(dest + ".part", dest)
        return b"".join(chunks)


def probe(index, version):
    url = index.rstrip("/") + "/costscale/"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"costscale-{version}".encode() in r.read()
    except OSError:
        return False


def wheelhouse(uri, target, dest):
    bucket, prefix = split_uri(uri)
    s3 = S3()
    manifest = json.loads(s3.get(bucket, f"{prefix}/manifest.json"))
    if manifest.get("costscale") != os.environ.get("COSTSCALE_VERSION"):
        sys.exit(f"costscale-bootstrap: error: the wheelhouse {uri} holds costscale {manifest.get('costscale')}, "
                 f"this launch wants {os.environ.get('COSTSCALE_VERSION')}: run costscale bundle again")
    wheels = (manifest.get("targets", {}).get(target) or {}).get("wheels")
    if not wheels:
        sys.exit(f"costscale-bootstrap: error: the wheelhouse {uri} has no wheels for {target} (it has "
                 f"{', '.join(sorted(manifest.get('targets', {}))) or 'none'}): run costscale bundle for it")
    os.makedirs(dest, mode=0o700, exist_ok=True)
    for w in wheels:
        name = os.path.basename(w["file"])
        s3.get(bucket, f"{prefix}/wheels/{name}", os.path.join(dest, name), w["sha256"])
    print(len(wheels))


def envfile(path):
    lines = []
    for k, v in sorted(os.environ.items()):
        if (k.startswith("COSTSCALE_") and not k.startswith(OWN)) or k in ("AWS_DEFAULT_REGION", "AWS_REGION"):
            if "\n" in v:
                sys.exit(f"costscale-bootstrap: error: {k} holds a newline")
            lines.append(k + '="' + v.replace("\\", "\\\\").replace('"', '\\"') + '"\n')
    fd = os.open(path + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)
    os.replace(path + ".part", path)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "probe":
        sys.exit(0 if probe(*args) else 1)
    elif cmd == "wheelhouse":
        wheelhouse(*args)
    elif cmd == "object":
        S3().get(*split_uri(args[0]), args[1])
    elif cmd == "envfile":
        envfile(*args)
PYHELPER
}

write_unit() {   # the same text as systemd/costscale-worker.service (a test keeps them equal)
  install -d -m 0755 "$UNIT_DIR"
  cat > "$UNIT_DIR/costscale-worker.service" <<'UNIT'
# costscale worker: written by costscale-worker-bootstrap.sh (issue #38); the environment is in
# /etc/costscale/worker.env (0600), the command in /opt/costscale/bin/costscale-worker-start.
[Unit]
Description=costscale worker: serves model variants for the costscale dispatcher
After=network-online.target
Wants=network-online.target
# a worker that keeps failing (a refused registration: another costscale version) is not restarted forever
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
Type=simple
EnvironmentFile=/etc/costscale/worker.env
Environment=PYTHONUNBUFFERED=1
ExecStart=/opt/costscale/bin/costscale-worker-start
Restart=on-failure
RestartSec=5
# exit 2 is a usage or config error: restarting cannot fix it
RestartPreventExitStatus=2
KillSignal=SIGTERM
TimeoutStopSec=60
StandardOutput=journal
StandardError=journal
SyslogIdentifier=costscale-worker
NoNewPrivileges=true
PrivateTmp=true
ProtectHome=true
UMask=0077

[Install]
WantedBy=multi-user.target
UNIT
  chmod 0644 "$UNIT_DIR/costscale-worker.service"
}

installed() {   # the venv holds costscale==VERSION and this hardware's ONNX Runtime build (a baked image)
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" "$1" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
def has(d):
    try:
        return bool(m.version(d))
    except m.PackageNotFoundError:
        return False
sys.exit(not (m.version("costscale") == sys.argv[1] and has("onnxruntime-gpu") == (sys.argv[2] == "onnxruntime-gpu")))
PY
}

PY=$(find_python)
if [ -z "$PY" ] && [ "$MODE" != plan ]; then
  log "no Python 3.11+ found: installing one"
  install_python
  PY=$(find_python)
  [ -n "$PY" ] || die "no Python 3.11+ after installing one"
fi
HW=$(hardware)
ORT=onnxruntime
if [ "$HW" = gpu ]; then ORT=onnxruntime-gpu; fi
write_helper
PYTAG=""
if [ -n "$PY" ]; then PYTAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")'); fi
TARGET="$PYTAG-$(uname -m)"
choose_source() {   # the wheelhouse when one is set, else the index when it serves costscale==VERSION (5 s at most)
  # The wheelhouse first: its wheels are the ones the daemon published, each checked against the
  # manifest's sha256; a public index may hold another package of the same name and version.
  if [ -n "$WHEELHOUSE" ]; then SOURCE=wheelhouse
  elif [ -n "$PY" ] && "$PY" "$HELPER" probe "$INDEX" "$VERSION"; then SOURCE=index
  else SOURCE=none
  fi
}

if [ "$MODE" = plan ]; then
  choose_source
  echo "python: ${PY:-none (would install with dnf or apt-get)}"
  echo "hardware: $HW"
  echo "onnxruntime: $ORT$ORT_SPEC"
  case $SOURCE in
    index) echo "source: index $INDEX" ;;
    wheelhouse) echo "source: wheelhouse $WHEELHOUSE ($TARGET)" ;;
    none) echo "source: none (the index does not serve costscale==$VERSION and no wheelhouse is set)" ;;
  esac
  exit 0
fi

if installed "$ORT"; then
  log "costscale $VERSION and $ORT already in $VENV: nothing to install"
else
  choose_source   # not asked on a baked image: a private subnet's probe would wait for its timeout
  [ "$SOURCE" != none ] || die "the package index ($INDEX) does not serve costscale==$VERSION and no wheelhouse is set (launch.wheelhouse; costscale bundle)"
  log "installing costscale==$VERSION and $ORT$ORT_SPEC ($HW) from the $SOURCE into $VENV with $PY"
  "$PY" -m venv --clear "$VENV"
  PIP=("$VENV/bin/python" -m pip install --quiet --no-compile --disable-pip-version-check)
  if [ "$SOURCE" = wheelhouse ]; then
    n=$("$PY" "$HELPER" wheelhouse "$WHEELHOUSE" "$TARGET" "$PREFIX/wheelhouse")
    log "fetched $n wheels for $TARGET from $WHEELHOUSE (sha256 checked)"
    PIP+=(--no-index --find-links "$PREFIX/wheelhouse")
  fi
  "${PIP[@]}" "costscale==$VERSION"
  if [ "$ORT" = onnxruntime-gpu ]; then   # the two builds install the same files: never both
    "$VENV/bin/python" -m pip uninstall --quiet --yes onnxruntime
    "${PIP[@]}" "onnxruntime-gpu$ORT_SPEC"
  fi
  if [ "$HW" = neuron ]; then
    log "Neuron device: the CPU ONNX Runtime is installed; the Neuron SDK (torch-neuronx) comes with the image"
  fi
fi
write_unit
if [ "$MODE" = bake ]; then
  log "baked: costscale $VERSION in $VENV, $UNIT_DIR/costscale-worker.service written (not started)"
  exit 0
fi

ARGS=()   # the worker's flags, s3:// models fetched here to local files
while [ $# -gt 0 ]; do
  if [ "$1" = --model ] && [ $# -gt 1 ] && [[ "$2" == *=s3://* ]]; then
    name=${2%%=*}; local_path="$PREFIX/models/$name.onnx"
    install -d -m 0700 "$PREFIX/models"
    "$PY" "$HELPER" object "${2#*=}" "$local_path"
    ARGS+=(--model "$name=$local_path"); shift 2
  else
    ARGS+=("$1"); shift
  fi
done
install -d -m 0700 "$ETC" "$PREFIX/bin" "$PREFIX/cache"
export COSTSCALE_CACHE_DIR=${COSTSCALE_CACHE_DIR:-$PREFIX/cache}
"$PY" "$HELPER" envfile "$ETC/worker.env"
{ printf '#!/bin/bash\nexec %q worker' "$VENV/bin/costscale"; printf ' %q' "${ARGS[@]}"; printf '\n'; } \
  > "$PREFIX/bin/costscale-worker-start"
chmod 0700 "$PREFIX/bin/costscale-worker-start"
if [ -d /run/systemd/system ] && [ -z "${COSTSCALE_FOREGROUND:-}" ] && [ -z "$ROOT" ]; then
  systemctl daemon-reload
  systemctl enable --now costscale-worker.service
  log "costscale-worker.service started (journalctl -u costscale-worker)"
else
  log "systemd is not PID 1 here: running the worker in the foreground"
  exec "$PREFIX/bin/costscale-worker-start"
fi
