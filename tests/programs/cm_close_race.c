/* A thread asking for events (rdma_get_cm_event on a non-blocking
 * channel, in a loop) while another closes the channel, round after
 * round, the next channel often taking the closed one's number: as on the
 * kernel's rdma_cm file, the asker gets EAGAIN or EBADF, never SIGPIPE or
 * another error. A write between the service forgetting the channel and
 * the close (or a stale look at a number a new channel had taken) went
 * into the channel's socket pair after its other end was gone, and the
 * signal killed the process (rping's server, whose event thread races its
 * teardown, once in a CI run). Then the askers, which go on writing to
 * the closed number, found other files there: a new channel made between
 * a write's look at the number and the write, or our end of a new
 * channel's pair (ECONNRESET, EPIPE, ENOTCONN from librdmacm's syslog
 * socket, SIGPIPE). Such askers go on for LINGER calls after the close
 * and are not joined (one writing to a number a new channel took, before
 * it was made non-blocking, waits for ever, as at the kernel's file);
 * each batch of rounds runs in a child process, which ends them. With
 * "join", each asker stops once the channel is
 * closed and is joined before the next round: a GET_EVENT that began
 * before the close returns (a non-blocking one waited for ever).
 * Usage: cm_close_race [ROUNDS] [BATCHES] [join] (300, 1). Prints
 * "close race ok". */
#include <rdma/rdma_cma.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { LINGER = 200 };

struct asker {
	struct rdma_event_channel *ch;
	atomic_int closed; /* the channel is closed */
	int join;
};

static void *ask(void *arg)
{
	struct asker *a = arg;
	struct rdma_cm_event *ev;
	/* Without join, LINGER calls after the close, on a number the next
	 * channels take. */
	for (int after = 0; a->join ? !atomic_load(&a->closed) : after < LINGER;
	     after += atomic_load(&a->closed)) {
		if (rdma_get_cm_event(a->ch, &ev) == 0) {
			rdma_ack_cm_event(ev);
		} else if (errno != EAGAIN && errno != EBADF) {
			fprintf(stderr, "rdma_get_cm_event: errno %d\n", errno);
			exit(1);
		}
	}
	return NULL;
}

static int batch(int rounds, int join)
{
	for (int i = 0; i < rounds; i++) {
		struct asker *a = calloc(1, sizeof *a); /* askers not joined keep theirs */
		if (!a) { perror("calloc"); return 1; }
		a->join = join;
		a->ch = rdma_create_event_channel();
		if (!a->ch) { perror("rdma_create_event_channel"); return 1; }
		int fd = a->ch->fd;
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		pthread_t t;
		pthread_create(&t, NULL, ask, a);
		for (volatile int spin = 0; spin < 20000; spin++) {}
		close(fd); /* what rdma_destroy_event_channel does, but keep ch for the asker */
		atomic_store(&a->closed, 1);
		if (join) {
			pthread_join(t, NULL);
			free(a->ch);
			free(a);
			continue;
		}
		for (volatile int spin = 0; spin < 20000; spin++) {}
		pthread_detach(t);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	int batches = argc > 2 ? atoi(argv[2]) : 1;
	int join = argc > 3 && strcmp(argv[3], "join") == 0;
	for (int b = 0; b < batches; b++) {
		pid_t child = fork();
		if (child < 0) { perror("fork"); return 1; }
		if (child == 0)
			_exit(batch(rounds, join));
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
