// Library the dlopen test loads at run time (built -O2
// -fomit-frame-pointer -shared): lib_outer -> lib_inner, which spins.
volatile unsigned long lib_sink;

__attribute__((noinline)) unsigned long lib_inner(unsigned long n) {
	volatile unsigned long buf[4];
	for (;;) {
		for (int i = 0; i < 4; i++)
			buf[i] = n + i;
		lib_sink += buf[n & 3];
	}
	return lib_sink;
}

__attribute__((noinline)) unsigned long lib_outer(unsigned long n) {
	volatile unsigned long x[3] = {n, n, n};
	unsigned long r = lib_inner(x[1] + 1);
	__asm__ volatile("" ::: "memory");
	return r + x[2];
}
