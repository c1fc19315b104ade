/* What the rdma_cm checks in tests/programs share: waiting for the next
 * event of a channel, and expecting one. Header-only, as test_util.h;
 * compiled with `cc FILE.c -lrdmacm -libverbs`. */
#ifndef SOFTVERBS_CM_UTIL_H
#define SOFTVERBS_CM_UTIL_H

#include <rdma/rdma_cma.h>
#include <poll.h>
#include <stdio.h>

/* The next event on `ch` within 15 s: its type (its id and status into
 * `id` and `status` where given), or -1. */
static inline int next_event(struct rdma_event_channel *ch, struct rdma_cm_id **id, int *status)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, 15000) != 1) {
		fprintf(stderr, "no event within 15 s\n");
		return -1;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		perror("rdma_get_cm_event");
		return -1;
	}
	int got = ev->event;
	if (id)
		*id = ev->id;
	if (status)
		*status = ev->status;
	rdma_ack_cm_event(ev);
	return got;
}

/* 0 if the next event on `ch` is `want`; else says so, as `who`, and -1. */
static inline int expect(struct rdma_event_channel *ch, int want, const char *who)
{
	int got = next_event(ch, NULL, NULL);
	if (got == want)
		return 0;
	fprintf(stderr, "%s: got %s, want %s\n", who, got < 0 ? "nothing" : rdma_event_str(got),
		rdma_event_str(want));
	return -1;
}

#endif
