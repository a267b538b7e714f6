/* The demo program: a call chain compiled the way distributions build
   (-O2 -fomit-frame-pointer), with SFrame (-Wa,--gsframe).  `scripts/demo.sh`
   removes its .eh_frame and, stopped in stop_here(), asks gdb and LLDB for
   the backtrace and for read_records' registers and variables, without the
   sframe plugin, with it, and on the twin that kept its .eh_frame.  */
#include <alloca.h>
#include <stdio.h>
#include <string.h>

__attribute__((noinline)) void stop_here(int depth)
{
    asm volatile("" ::"r"(depth) : "memory");
}

/* alloca makes GCC keep the CFA in %rbp here; it saves its caller's rbx,
   r12 and r13 on its stack and then uses them itself.  */
__attribute__((noinline)) int parse_record(const char *text, int n)
{
    char *copy = alloca(n + 1);
    memcpy(copy, text, n);
    copy[n] = 0;
    if (n == 12)                /* the third record: the debuggers stop here */
        stop_here(n);
    return copy[0] + copy[n - 1];
}

/* Keeps its variables in callee-saved registers across the calls: in this
   frame a debugger finds them only where parse_record saved them.  */
__attribute__((noinline)) int read_records(const char *text, int count)
{
    int total = 0;
    for (int i = 1; i <= count; i++)
        total += parse_record(text, i * 4);
    return total;
}

/* Cold, like an error path: GCC moves the code that calls it out of line. */
__attribute__((noinline, cold)) void note_slow_path(int argc)
{
    asm volatile("" ::"r"(argc) : "memory");
}

__attribute__((noinline)) int load_config(int argc)
{
    volatile char big[512];
    big[argc] = 'x';
    if (argc < 3) {             /* no cached configuration: in load_config.cold */
        note_slow_path(argc);
        return read_records("sframe-demo-configuration", argc + 2) + big[argc];
    }
    return big[argc];
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("result %d\n", load_config(argc) & 0xff);
    return 0;
}
