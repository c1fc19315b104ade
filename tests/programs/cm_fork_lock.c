/* A process forks while another of its threads makes rdma_cm channels
 * (rdma_create_event_channel and rdma_destroy_event_channel in a loop).
 * The child writes to a number that was a channel, now /dev/null: the
 * write must not wait. A write to such a number holds a share of a lock
 * that making a channel takes alone (so a write never lands in a channel
 * made between its look at the number and the write); a child forked
 * while a channel was being made had that lock taken by a thread it does
 * not have, and each of its writes waited the lock's full bound (1 s).
 * 40 forks, 20 writes each; a write that takes 0.9 s or more fails.
 * (The child calls no librdmacm function: librdmacm's own lock may be
 * held by the maker thread at the fork, on any provider.)
 * Usage: cm_fork_lock. Prints "cm fork lock ok". */
#include <rdma/rdma_cma.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;

static void *maker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct rdma_event_channel *c = rdma_create_event_channel();
		if (c)
			rdma_destroy_event_channel(c);
	}
	return NULL;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void child(int fd)
{
	char b[16] = {0};
	for (int k = 0; k < 20; k++) {
		double t0 = now();
		if (write(fd, b, sizeof b) != sizeof b)
			_exit(3);
		if (now() - t0 >= 0.9)
			_exit(4);
	}
	_exit(0);
}

int main(void)
{
	struct rdma_event_channel *c0 = rdma_create_event_channel();
	if (!c0) { perror("rdma_create_event_channel"); return 1; }
	int former = c0->fd;
	rdma_destroy_event_channel(c0);
	int null = open("/dev/null", O_WRONLY);
	if (null != former) {
		fprintf(stderr, "/dev/null took %d, not %d\n", null, former);
		return 1;
	}
	pthread_t t;
	pthread_create(&t, NULL, maker, NULL);
	for (int i = 0; i < 40; i++) {
		pid_t p = fork();
		if (p < 0) { perror("fork"); return 1; }
		if (p == 0)
			child(former);
		int st;
		if (waitpid(p, &st, 0) != p) { perror("waitpid"); return 1; }
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "child %d: status 0x%x (4: a write waited)\n", i, st);
			return 1;
		}
		usleep(1000); /* let the maker run between forks */
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("cm fork lock ok\n");
	return 0;
}
