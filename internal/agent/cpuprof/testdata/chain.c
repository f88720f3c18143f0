// A known call chain for the unwinder tests (built with gcc -O2
// -fomit-frame-pointer): main -> chain_a -> chain_b -> chain_c -> chain_d,
// which spins in user space, or with argument "sys" reads /dev/zero in a
// loop (kernel-mode samples). The asm barriers after each call keep the
// calls from becoming tail jumps; the locals keep real stack frames.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile unsigned long sink;
static int sys_fd = -1;
static char big[1 << 20];

__attribute__((noinline)) unsigned long chain_d(unsigned long n) {
	volatile unsigned long buf[8];
	if (sys_fd >= 0)
		for (;;)
			sink += read(sys_fd, big, sizeof(big));
	for (;;) {
		for (int i = 0; i < 8; i++)
			buf[i] = n + i;
		sink += buf[n & 7];
	}
	return sink;
}

__attribute__((noinline)) unsigned long chain_c(unsigned long n) {
	volatile unsigned long x[4] = {n, n + 1, n + 2, n + 3};
	unsigned long r = chain_d(x[1]);
	__asm__ volatile("" ::: "memory");
	return r + x[2];
}

__attribute__((noinline)) unsigned long chain_b(unsigned long n) {
	volatile unsigned long x[6] = {n, n, n, n, n, n};
	unsigned long r = chain_c(x[3] + 1);
	__asm__ volatile("" ::: "memory");
	return r + x[4];
}

__attribute__((noinline)) unsigned long chain_a(unsigned long n) {
	volatile unsigned long x[2] = {n, n};
	unsigned long r = chain_b(x[0] * 3);
	__asm__ volatile("" ::: "memory");
	return r ^ x[1];
}

int main(int argc, char **argv) {
	unsigned long n = 7;
	if (argc > 1 && strcmp(argv[1], "sys") == 0)
		sys_fd = open("/dev/zero", O_RDONLY);
	printf("ready\n");
	fflush(stdout);
	unsigned long r = chain_a(n);
	__asm__ volatile("" ::: "memory");
	return (int)(r & 1);
}
