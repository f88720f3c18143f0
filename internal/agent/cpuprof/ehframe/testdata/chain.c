// chain.c — the known call chain main → a → b → c → d of the unwinding
// tests and the §5.2 frame-accuracy evaluation (SysOM-AI). Built with
// -O2 -fomit-frame-pointer; -DFP_MIXED keeps frame pointers in a and c
// only (a mixed binary, as production processes are). Each function works
// a while before calling the next, so samples land at every depth; c uses
// a variable-length array so its CFA is RBP-based even without frame
// pointers. The link exports only chain_memcpy, c, a and main (a sparse
// .dynsym, --dynamic-list): node-side nearest-lower naming then names d
// "chain_memcpy" and b "c" — a fictitious c→c recursion as in §5.3.
#include <stdio.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))
#ifdef FP_MIXED
#define KEEPFP __attribute__((optimize("no-omit-frame-pointer")))
#else
#define KEEPFP
#endif

volatile unsigned long sink;

NOIPA void chain_memcpy(char *dst, const char *src, unsigned long n) {
	for (unsigned long i = 0; i < n; i++)
		dst[i] = src[i];
}

NOIPA void d(long n) {
	volatile long x = 0;
	for (long i = 0; i < n; i++)
		x += i;
	sink += x;
}

NOIPA KEEPFP void c(long n) {
	volatile char vla[(n & 15) + 16];
	vla[0] = 1;
	for (long i = 0; i < n / 2; i++)
		vla[i & 15] += i;
	d(n * 2);
	sink += vla[0];
}

NOIPA void b(long n) {
	volatile long x[4] = {0};
	for (long i = 0; i < n / 2; i++)
		x[i & 3] += i;
	c(n);
	sink += x[1];
}

NOIPA KEEPFP void a(long n) {
	volatile long x = 0;
	for (long i = 0; i < n / 4; i++)
		x += i;
	b(n);
	sink += x;
}

int main(int argc, char **argv) {
	char buf[16];
	chain_memcpy(buf, "ready", 6);
	printf("%s %d\n", buf, (int)getpid());
	fflush(stdout);
	for (;;)
		a(200000 + argc);
}
