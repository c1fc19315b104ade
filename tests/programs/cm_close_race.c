/* A thread asking for events (rdma_get_cm_event on a non-blocking
 * channel, in a loop) while another closes the channel, round after
 * round, the next channel often taking the closed one's number: as on the
 * kernel's rdma_cm file, the asker gets EAGAIN, EBADF, or waits for ever,
 * never SIGPIPE or another error. A write between the service forgetting
 * the channel and the close (or a stale look at a number a new channel
 * had taken) went into the channel's socket pair after its other end was
 * gone, and the signal killed the process (rping's server, whose event
 * thread races its teardown, once in a CI run). Then the askers, which
 * go on writing to the closed number, found other files there: a new
 * channel made between a write's look at the number and the write, or
 * our end of a new channel's pair (ECONNRESET, EPIPE, ENOTCONN from
 * librdmacm's syslog socket, SIGPIPE). Askers are not joined: one whose
 * write began before the close may wait for ever, as at the kernel's
 * file; each batch of rounds runs in a child process, which ends them.
 * Usage: cm_close_race [ROUNDS] [BATCHES] (300, 1). Prints
 * "close race ok". */
#include <rdma/rdma_cma.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *ask(void *arg)
{
	struct rdma_event_channel *ch = arg;
	struct rdma_cm_event *ev;
	for (;;) { /* until the process ends */
		if (rdma_get_cm_event(ch, &ev) == 0) {
			rdma_ack_cm_event(ev);
		} else if (errno != EAGAIN && errno != EBADF) {
			fprintf(stderr, "rdma_get_cm_event: errno %d\n", errno);
			exit(1);
		}
	}
}

static int batch(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		if (!ch) { perror("rdma_create_event_channel"); return 1; }
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		pthread_t t;
		pthread_create(&t, NULL, ask, ch);
		for (volatile int spin = 0; spin < 20000; spin++) {}
		close(ch->fd); /* what rdma_destroy_event_channel does, but keep ch for the asker */
		for (volatile int spin = 0; spin < 20000; spin++) {}
		pthread_detach(t);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	int batches = argc > 2 ? atoi(argv[2]) : 1;
	for (int b = 0; b < batches; b++) {
		pid_t child = fork();
		if (child < 0) { perror("fork"); return 1; }
		if (child == 0)
			_exit(batch(rounds));
		int status;
		if (waitpid(child, &status, 0) != child) { perror("waitpid"); return 1; }
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "batch %d: status 0x%x\n", b, status);
			return 1;
		}
	}
	printf("close race ok\n");
	return 0;
}
