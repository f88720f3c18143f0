package cpuprof

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -no-global-types -type config -type count_key -type ustack -type mapping -type proc -type file_idx -type unwind_row -type marker_key -type pyproc cpuprof bpf/cpuprof.c
