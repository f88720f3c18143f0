// main -> outer -> spin_nocfi, where spin_nocfi is hand-written assembly
// without CFI directives (like OpenBLAS kernels): no FDE covers it, but
// it keeps a frame-pointer frame. Built with -fno-omit-frame-pointer.
#include <stdio.h>

__asm__(".text\n"
	".globl spin_nocfi\n"
	".type spin_nocfi,@function\n"
	"spin_nocfi:\n"
	"	push %rbp\n"
	"	mov %rsp,%rbp\n"
	"1:	pause\n"
	"	jmp 1b\n"
	".size spin_nocfi,.-spin_nocfi\n");

void spin_nocfi(void);

__attribute__((noinline)) void outer(void) {
	spin_nocfi();
	__asm__ volatile("" ::: "memory");
}

int main(void) {
	printf("ready\n");
	fflush(stdout);
	outer();
	return 0;
}
