#!/usr/bin/env bash
# Steady-state cost of `laggard agent` beside a running 4-rank DDP demo: the agent's CPU
# (user+system from /proc) over 60 s after a 40 s start, and its RSS. Run as root from the
# repository root after `make build`: RATIO=0.1 bash eval/sysom/agent_steady.sh
set -e
W=$(mktemp -d)
./bin/laggard serve -addr 127.0.0.1:7791 -greyhound-interval 0 $W/data > $W/serve.log 2>&1 &
SRV=$!
sleep 2
./bin/laggard agent -server http://127.0.0.1:7791 --socket $W/a.sock --profile-ratio ${RATIO:-0.1} > $W/agent.log 2>&1 &
AG=$!
sleep 2
LAGGARD_AGENT_SOCKET=$W/a.sock /usr/bin/python3 clients/python/examples/ddp_demo.py --world 4 --steps 100000 --server http://127.0.0.1:7791 --job steady --device-ms 30 --log-every 100000 > $W/demo.log 2>&1 &
DM=$!
sleep 40
t0=$(awk '{print $14+$15}' /proc/$AG/stat); s0=$(date +%s.%N)
sleep 60
t1=$(awk '{print $14+$15}' /proc/$AG/stat); s1=$(date +%s.%N)
echo "ratio ${RATIO:-0.1}: agent steady CPU $(echo "($t1-$t0)/100/($s1-$s0)*100" | bc -l | cut -c1-6)% of one core; RSS $(grep VmRSS /proc/$AG/status); HWM $(grep VmHWM /proc/$AG/status)"
kill $DM; pkill -f ddp_demo.py || true; kill $AG; kill $SRV; wait 2>/dev/null || true
