#!/bin/bash
# Where the fixed cost of `hotpin run` goes on a short PyTorch job: import, CUDA's start, exit.
# Usage: BIN=dir bash bench/gpu/cannot_help/startup.sh (4 rounds of plain, `hotpin run`, LD_PRELOAD alone)
BIN=${BIN:-target/release}
P='import time; t0=time.time(); import torch; t1=time.time(); x=torch.empty(1<<20, device="cuda"); torch.cuda.synchronize(); t2=time.time(); print("import %.3f cuda %.3f end %.6f" % (t1-t0, t2-t1, time.time()))'
for r in 1 2 3 4; do
  for c in plain auto preload; do
    b=$EPOCHREALTIME
    case $c in
      plain) out=$(python3 -c "$P") ;;
      auto) out=$($BIN/hotpin run -- python3 -c "$P" 2>/dev/null) ;;
      preload) out=$(LD_PRELOAD=$(cd "$BIN" && pwd)/libhotpin_preload.so python3 -c "$P") ;;
    esac
    e=$EPOCHREALTIME
    end=$(echo "$out" | awk '{print $6}')
    echo "$c $r $out wall $(awk "BEGIN{print $e-$b}") exit_after_end $(awk "BEGIN{print $e-$end}")"
  done
done
