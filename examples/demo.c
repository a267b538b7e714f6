/* The demo program: a call chain compiled the way distributions build
   (-O2 -fomit-frame-pointer), with SFrame (-Wa,--gsframe).  `scripts/demo.sh`
   removes its .eh_frame and asks gdb for a backtrace at stop_here(), first
   without the sframe plugin, then with it.  */
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void stop_here(int depth)
{
    asm volatile("" ::"r"(depth) : "memory");
}

/* alloca makes GCC keep the CFA in %rbp here. */
__attribute__((noinline)) int parse_record(const char *text, int n)
{
    char *copy = alloca(n + 1);
    memcpy(copy, text, n);
    copy[n] = 0;
    stop_here(n);
    return copy[0] + copy[n - 1];
}

__attribute__((noinline)) int read_records(const char *text)
{
    int total = 0;
    for (int i = 1; i <= 3; i++)
        total += parse_record(text, i * 4);
    return total;
}

__attribute__((noinline)) int load_config(int argc)
{
    volatile char big[512];
    big[argc] = 'x';
    return read_records("sframe-demo-configuration") + big[argc];
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("result %d\n", load_config(argc) & 0xff);
    return 0;
}
