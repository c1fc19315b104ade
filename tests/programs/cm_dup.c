/* Duplicates of an rdma_cm event channel are the channel, as duplicates
 * of the kernel's rdma_cm file are that file:
 * - commands and events through a dup() of it, once the number it was
 *   opened as is closed (an id's port stays held until the last number
 *   closes, then is free);
 * - a thousand commands through a duplicate (they went into the
 *   channel's socket pair and did nothing, and the writes blocked after
 *   about 280: found by adversarial testing, 2026-12-06);
 * - dup2, dup3 and fcntl(F_DUPFD_CLOEXEC) onto chosen numbers, poll
 *   seeing an event through each;
 * - a dup2 over a channel closes it (its id's port is free);
 * - a thread's commands through a duplicate all succeed while another
 *   closes the number the channel was opened as (the channel moves to
 *   the duplicate's number meanwhile).
 * Usage: cm_dup IP PORT. Prints "cm dup ok". */
#define _GNU_SOURCE
#include <rdma/rdma_cma.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static struct sockaddr_in addr;

/* Binds a new id of `ch` to the test's address and port: rdma_bind_addr's
 * result, errno in `err`. */
static int bind_on(struct rdma_event_channel *ch, struct rdma_cm_id **id, int *err)
{
	if (rdma_create_id(ch, id, NULL, RDMA_PS_TCP))
		FAIL("rdma_create_id: %s", strerror(errno));
	int rc = rdma_bind_addr(*id, (struct sockaddr *)&addr);
	*err = errno;
	return rc;
}

/* Whether the test's port is free: a fresh channel's id binds it. */
static int port_free(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	int err;
	if (!ch)
		FAIL("rdma_create_event_channel: %s", strerror(errno));
	int rc = bind_on(ch, &id, &err);
	if (rc && err != EADDRINUSE)
		FAIL("rdma_bind_addr: %s", strerror(err));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return rc == 0;
}

/* Resolves the test's address on a new id of `ch`, whose number is now
 * `fd`: the ADDR_RESOLVED event, seen by poll on `fd` first. */
static void resolve_through(struct rdma_event_channel *ch, int fd)
{
	struct rdma_cm_id *id;
	ch->fd = fd;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		FAIL("rdma_create_id through %d: %s", fd, strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&addr, 2000))
		FAIL("rdma_resolve_addr through %d: %s", fd, strerror(errno));
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN))
		FAIL("poll on duplicate %d: no event", fd);
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(id->channel, &ev))
		FAIL("rdma_get_cm_event through %d: %s", fd, strerror(errno));
	if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		FAIL("through %d: event %s", fd, rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	if (rdma_destroy_id(id))
		FAIL("rdma_destroy_id through %d: %s", fd, strerror(errno));
}

/* The lowest descriptor number from `from` that is free. */
static int free_number(int from)
{
	int probe = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, from);
	if (probe < 0)
		FAIL("F_DUPFD: %s", strerror(errno));
	close(probe);
	return probe;
}

static atomic_int commands;

/* Ids made and destroyed through the duplicate `arg` names, until told
 * to stop (commands < 0). */
static void *command_through(void *arg)
{
	struct rdma_event_channel ch = { .fd = *(int *)arg };
	while (atomic_load(&commands) >= 0) {
		struct rdma_cm_id *id;
		if (rdma_create_id(&ch, &id, NULL, RDMA_PS_TCP) || rdma_destroy_id(id))
			FAIL("a command through the duplicate as the channel moved: %s",
			     strerror(errno));
		atomic_fetch_add(&commands, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		FAIL("usage: cm_dup IP PORT");
	addr.sin_family = AF_INET;
	addr.sin_port = htons((unsigned short)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1)
		FAIL("bad address %s", argv[1]);

	/* The number it was opened as closed, the duplicate goes on. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	int err;
	if (!ch || bind_on(ch, &id, &err))
		FAIL("setup: %s", strerror(errno));
	int opened = ch->fd, d = dup(opened);
	if (d < 0)
		FAIL("dup: %s", strerror(errno));
	close(opened);
	if (port_free())
		FAIL("the id's port was freed while a duplicate holds its channel");
	ch->fd = d;
	for (int i = 0; i < 1000; i++) {
		struct rdma_cm_id *more;
		if (rdma_create_id(ch, &more, NULL, RDMA_PS_TCP) || rdma_destroy_id(more))
			FAIL("command %d through the duplicate: %s", i, strerror(errno));
	}
	resolve_through(ch, d);

	/* dup2, dup3, F_DUPFD_CLOEXEC: each number is the channel (dup2 and
	 * dup3 onto numbers found free). */
	int free2 = free_number(100), free3 = free_number(free2 + 1);
	int to2 = dup2(d, free2), to3 = dup3(d, free3, O_CLOEXEC);
	int above = fcntl(d, F_DUPFD_CLOEXEC, free3 + 1);
	if (to2 != free2 || to3 != free3 || above <= free3)
		FAIL("dup2 %d, dup3 %d, F_DUPFD_CLOEXEC %d: %s", to2, to3, above, strerror(errno));
	close(d);
	int numbers[] = { to2, to3, above };
	for (int i = 0; i < 3; i++) {
		resolve_through(ch, numbers[i]);
		if (i < 2)
			close(numbers[i]);
	}
	if (port_free())
		FAIL("the id's port was freed while one number holds its channel");
	close(above);
	if (!port_free())
		FAIL("the last number closed, the id's port is still held");
	free(ch); /* its number is closed: rdma_destroy_event_channel's close is done */

	/* dup2 over a channel closes it. */
	ch = rdma_create_event_channel();
	if (!ch || bind_on(ch, &id, &err))
		FAIL("setup: %s", strerror(errno));
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, ch->fd) != ch->fd)
		FAIL("dup2 over the channel: %s", strerror(errno));
	if (!port_free())
		FAIL("a channel dup2 closed still holds its id's port");
	if (write(ch->fd, "x", 1) != 1)
		FAIL("a write to /dev/null, which dup2 put over the channel: %s", strerror(errno));
	/* The number opened closed while a thread commands through a
	 * duplicate, a little later each round. */
	for (int round = 0; round < 50; round++) {
		struct rdma_event_channel *c = rdma_create_event_channel();
		if (!c)
			FAIL("rdma_create_event_channel: %s", strerror(errno));
		int dupped = dup(c->fd);
		pthread_t t;
		atomic_store(&commands, 0);
		pthread_create(&t, NULL, command_through, &dupped);
		while (atomic_load(&commands) < round)
			;
		close(c->fd);
		while (atomic_load(&commands) < round + 20)
			;
		atomic_store(&commands, -1000000);
		pthread_join(t, NULL);
		close(dupped);
		free(c);
	}
	puts("cm dup ok");
	return 0;
}
