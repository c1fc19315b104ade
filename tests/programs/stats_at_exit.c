/* SOFTVERBS_STATS for a context still open at exit: its line is printed
 * once, by the process that opened it. This program registers an exit
 * handler that closes the context, before it opens the device (so the
 * handler runs after softverbs' own, which printed the line already),
 * forks a child that exits at once (its exit must not print or count
 * the parent's context), waits for it and returns. It prints "parent
 * PID"; the caller checks that stderr has exactly one counters line, the
 * parent's. Usage: stats_at_exit. */
#define _GNU_SOURCE
#include "test_util.h"
#include <sys/wait.h>
#include <unistd.h>

static struct ibv_context *ctx;
static pid_t parent;

/* The parent's close, at its exit (a child's copy of the context is not
 * the child's to close). */
static void close_at_exit(void)
{
	if (ctx && getpid() == parent)
		ibv_close_device(ctx);
}

int main(void)
{
	parent = getpid();
	CHECK(!atexit(close_at_exit), "atexit");
	ctx = open_device_named("softverbs0");
	CHECK(ctx, "open softverbs0");
	fflush(stdout);
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0)
		exit(0);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the child failed");
	printf("parent %d\n", (int)getpid());
	return 0;
}
