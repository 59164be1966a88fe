// planted.cc - one bad comment of each kind the check catches, and good ones it must leave alone.
// Fixed in session 12.
// Loads stay in flight (8b decode on 2xH200: 4.251 -> 4.153 ms/step).
// The grid was 32 us before the change.
// p2p beats NCCL: 3.8 vs 6.9 us at 8 KiB.
// Timed the same on 2xH200 either way.
// Fastest block shape (docs/PERFORMANCE.md, "The synthetic transformer").
// Field ids (../shared/docs/H200-FACTS.md).
// The reader's old home: src/meter/nvml_source.cc, with dmon_source.cc beside it.
// Good: the default is the fastest (docs/PERFORMANCE.md, "AllReduce"); 4 KiB -> one block.
// Good: this file (src/planted.cc, planted.cc), stdio.h, llama.cpp's docs/gguf.md, a RUN_DIR/manifest.json.
int planted = 0;
