// dlopen test driver: prints "ready", waits for a line on stdin, then
// loads the library named by argv[1] and calls lib_outer from dl_caller.
#include <dlfcn.h>
#include <stdio.h>

typedef unsigned long (*fn)(unsigned long);

__attribute__((noinline)) unsigned long dl_caller(fn f) {
	volatile unsigned long x[2] = {5, 6};
	unsigned long r = f(x[0]);
	__asm__ volatile("" ::: "memory");
	return r + x[1];
}

int main(int argc, char **argv) {
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (argc < 2 || !fgets(line, sizeof(line), stdin))
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	fn f = (fn)dlsym(h, "lib_outer");
	if (!f)
		return 1;
	unsigned long r = dl_caller(f);
	__asm__ volatile("" ::: "memory");
	return (int)(r & 1);
}
