/* rdma_migrate_id of a listener served by the kernel's rdma_cm, in a
 * process with softverbs' too: a listener made on channel 1 and bound to
 * LISTEN_ADDR (a kernel device's address, so the id moves to the kernel's
 * rdma_cm; or a wildcard, so softverbs' listener gets a shadow in the
 * kernel's) is migrated to channel 2, and a client on channel 1 connects
 * to it from SOURCE_ADDR through the kernel's rdma_cm. The connection
 * request must come on channel 2; the connection is established, torn
 * down, and every id destroyed (which waits for every event's ack). The
 * client's ACK timeout option, set before the id has an address (so set
 * again on the kernel's id when it moves there), must be its QP's.
 * Usage: cm_migrate LISTEN_ADDR SOURCE_ADDR DEST_ADDR PORT. Prints
 * "cm_migrate ok". */
#include <netdb.h>
#include <poll.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_migrate: " __VA_ARGS__); \
	fprintf(stderr, "\n"); exit(1); } } while (0)

static struct sockaddr_storage addr_of(const char *host, const char *port)
{
	struct addrinfo *ai, hints = { .ai_flags = AI_NUMERICHOST };
	CHECK(!getaddrinfo(host, port, &hints, &ai), "getaddrinfo %s", host);
	struct sockaddr_storage ss = { 0 };
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return ss;
}

static struct rdma_event_channel *channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %m");
	CHECK(!fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), "fcntl: %m");
	return ch;
}

/* The next event of either channel: which one in *which. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch[2], int *which)
{
	struct pollfd p[2] = { { .fd = ch[0]->fd, .events = POLLIN }, { .fd = ch[1]->fd, .events = POLLIN } };
	for (;;) {
		for (int i = 0; i < 2; i++) {
			struct rdma_cm_event *ev;
			if (!rdma_get_cm_event(ch[i], &ev)) {
				*which = i + 1;
				return ev;
			}
		}
		CHECK(poll(p, 2, 10000) > 0, "no event in 10 s");
	}
}

/* Waits for `want` on channel `on`, acks it; the event's id. */
static struct rdma_cm_id *expect(struct rdma_event_channel *ch[2], enum rdma_cm_event_type want, int on)
{
	int which;
	struct rdma_cm_event *ev = next_event(ch, &which);
	CHECK(ev->event == want && which == on, "%s on channel %d, expected %s on channel %d (status %d)",
	      rdma_event_str(ev->event), which, rdma_event_str(want), on, ev->status);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	return id;
}

int main(int argc, char **argv)
{
	CHECK(argc == 5, "usage: cm_migrate LISTEN_ADDR SOURCE_ADDR DEST_ADDR PORT");
	struct rdma_event_channel *ch[2] = { channel(), channel() };
	struct sockaddr_storage listen_addr = addr_of(argv[1], argv[4]);
	struct sockaddr_storage src = addr_of(argv[2], "0"), dst = addr_of(argv[3], argv[4]);

	struct rdma_cm_id *listener, *client;
	CHECK(!rdma_create_id(ch[0], &listener, NULL, RDMA_PS_TCP), "create_id: %m");
	CHECK(!rdma_bind_addr(listener, (struct sockaddr *)&listen_addr), "bind %s: %m", argv[1]);
	CHECK(!rdma_listen(listener, 4), "listen: %m");
	CHECK(!rdma_migrate_id(listener, ch[1]), "migrate_id: %m");

	CHECK(!rdma_create_id(ch[0], &client, NULL, RDMA_PS_TCP), "create_id: %m");
	uint8_t ack_timeout = 11; /* the path's own is 19 on rxe */
	CHECK(!rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
			       sizeof(ack_timeout)), "set_option ACK_TIMEOUT: %m");
	CHECK(!rdma_resolve_addr(client, (struct sockaddr *)&src, (struct sockaddr *)&dst, 5000), "resolve_addr: %m");
	expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1);
	CHECK(!rdma_resolve_route(client, 5000), "resolve_route: %m");
	expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 1);
	/* rdma_create_qp fills in the CQs it made: one attr per QP. */
	const struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
		.max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp_init_attr client_qa = qa, server_qa = qa;
	CHECK(!rdma_create_qp(client, NULL, &client_qa), "create_qp (client): %m");
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 3 };
	CHECK(!rdma_connect(client, &param), "connect: %m");

	struct rdma_cm_id *server = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 2);
	CHECK(!rdma_create_qp(server, NULL, &server_qa), "create_qp (server): %m");
	CHECK(!rdma_accept(server, &param), "accept: %m");
	int which, established = 0;
	while (established < 2) {
		struct rdma_cm_event *ev = next_event(ch, &which);
		CHECK(ev->event == RDMA_CM_EVENT_ESTABLISHED, "%s, expected ESTABLISHED", rdma_event_str(ev->event));
		established++;
		rdma_ack_cm_event(ev);
	}
	printf("connected through the listener migrated to channel 2 (%s)\n",
	       ibv_get_device_name(server->verbs->device));
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	CHECK(!ibv_query_qp(client->qp, &attr, IBV_QP_TIMEOUT, &init), "query_qp: %m");
	CHECK(attr.timeout == ack_timeout, "the client's QP has timeout %d, not the option's %d",
	      attr.timeout, ack_timeout);
	CHECK(!rdma_disconnect(client), "disconnect: %m");
	for (int gone = 0; gone < 2;) {
		struct rdma_cm_event *ev = next_event(ch, &which);
		/* TIMEWAIT_EXIT may come once a side's QP leaves time wait. */
		CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT,
		      "%s, expected DISCONNECTED", rdma_event_str(ev->event));
		gone += ev->event == RDMA_CM_EVENT_DISCONNECTED;
		/* The server's DREP, which ends the client's disconnect. */
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == server)
			rdma_disconnect(server);
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(client);
	rdma_destroy_qp(server);
	CHECK(!rdma_destroy_id(client) && !rdma_destroy_id(server) && !rdma_destroy_id(listener), "destroy_id: %m");
	rdma_destroy_event_channel(ch[0]);
	rdma_destroy_event_channel(ch[1]);
	printf("cm_migrate ok\n");
	return 0;
}
