/* One process, one rdma_cm event channel, two connections: one over a
 * softverbs device and one over a kernel RDMA device (rxe), each with a
 * listener and a client of this process. The cm_id bound to the softverbs
 * address must use softverbs' rdma_cm and device, the other the kernel's
 * (issue 11: "real devices keep their own rdma_cm"). Each client sends one
 * message its server checks. Usage: cm_mixed SOFT_ADDR KERNEL_ADDR PORT.
 * Prints each connection's device, then "cm_mixed ok". */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "cm_mixed: " __VA_ARGS__); \
	fprintf(stderr, "\n"); exit(1); } } while (0)

struct conn {
	const char *name;              /* "soft" or "kernel" */
	struct rdma_cm_id *listener, *client, *server;
	char send[32], recv[32];
	struct ibv_mr *send_mr, *recv_mr;
	int established;               /* both ends */
};

static struct conn conns[2];

static struct conn *conn_of(struct rdma_cm_id *id)
{
	return id->context;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 2, .max_recv_wr = 2,
		.max_send_sge = 1, .max_recv_sge = 1 }, .qp_type = IBV_QPT_RC, .sq_sig_all = 1 };
	CHECK(!rdma_create_qp(id, NULL, &qa), "rdma_create_qp: %m");
}

static void listen_on(struct rdma_event_channel *ch, struct conn *c, const char *addr, const char *port)
{
	struct addrinfo *ai;
	CHECK(!getaddrinfo(addr, port, NULL, &ai), "getaddrinfo %s", addr);
	CHECK(!rdma_create_id(ch, &c->listener, c, RDMA_PS_TCP), "create_id: %m");
	CHECK(!rdma_bind_addr(c->listener, ai->ai_addr), "%s: bind %s: %m", c->name, addr);
	CHECK(!rdma_listen(c->listener, 4), "%s: listen: %m", c->name);
	CHECK(!rdma_create_id(ch, &c->client, c, RDMA_PS_TCP), "create_id: %m");
	CHECK(!rdma_resolve_addr(c->client, NULL, ai->ai_addr, 5000), "%s: resolve_addr: %m", c->name);
	freeaddrinfo(ai);
}

int main(int argc, char **argv)
{
	CHECK(argc == 4, "usage: cm_mixed SOFT_ADDR KERNEL_ADDR PORT");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %m");
	conns[0].name = "soft";
	conns[1].name = "kernel";
	listen_on(ch, &conns[0], argv[1], argv[3]);
	listen_on(ch, &conns[1], argv[2], argv[3]);

	int established = 0;
	while (established < 4) {
		struct rdma_cm_event *ev;
		CHECK(!rdma_get_cm_event(ch, &ev), "get_cm_event: %m");
		struct rdma_cm_id *id = ev->id;
		struct conn *c = conn_of(ev->listen_id ? ev->listen_id : id);
		CHECK(!ev->status || ev->event == RDMA_CM_EVENT_ESTABLISHED,
		      "%s: %s, status %d", c->name, rdma_event_str(ev->event), ev->status);
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			CHECK(!rdma_resolve_route(id, 5000), "%s: resolve_route: %m", c->name);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			make_qp(id);
			CHECK(!rdma_connect(id, NULL), "%s: connect: %m", c->name);
			break;
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			c->server = id;
			id->context = c;
			make_qp(id);
			c->recv_mr = rdma_reg_msgs(id, c->recv, sizeof(c->recv));
			CHECK(c->recv_mr, "%s: reg_msgs: %m", c->name);
			CHECK(!rdma_post_recv(id, NULL, c->recv, sizeof(c->recv), c->recv_mr),
			      "%s: post_recv: %m", c->name);
			CHECK(!rdma_accept(id, NULL), "%s: accept: %m", c->name);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			established++;
			break;
		default:
			CHECK(0, "%s: unexpected %s", c->name, rdma_event_str(ev->event));
		}
		rdma_ack_cm_event(ev);
	}

	for (int i = 0; i < 2; i++) {
		struct conn *c = &conns[i];
		struct ibv_wc wc = { 0 };
		snprintf(c->send, sizeof(c->send), "hello over %s", c->name);
		c->send_mr = rdma_reg_msgs(c->client, c->send, sizeof(c->send));
		CHECK(c->send_mr, "%s: reg_msgs: %m", c->name);
		CHECK(!rdma_post_send(c->client, NULL, c->send, sizeof(c->send), c->send_mr, 0),
		      "%s: post_send: %m", c->name);
		CHECK(rdma_get_send_comp(c->client, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
		      "%s: send completion: %s", c->name, ibv_wc_status_str(wc.status));
		CHECK(rdma_get_recv_comp(c->server, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
		      "%s: receive completion: %s", c->name, ibv_wc_status_str(wc.status));
		CHECK(!strcmp(c->recv, c->send), "%s: received \"%s\"", c->name, c->recv);
		printf("%s: client on %s, server on %s: \"%s\"\n", c->name,
		       ibv_get_device_name(c->client->verbs->device),
		       ibv_get_device_name(c->server->verbs->device), c->recv);
	}

	for (int i = 0; i < 2; i++) {
		struct conn *c = &conns[i];
		rdma_disconnect(c->client);
		rdma_dereg_mr(c->send_mr);
		rdma_dereg_mr(c->recv_mr);
		rdma_destroy_qp(c->client);
		rdma_destroy_qp(c->server);
		CHECK(!rdma_destroy_id(c->client) && !rdma_destroy_id(c->server) &&
		      !rdma_destroy_id(c->listener), "%s: destroy_id: %m", c->name);
	}
	rdma_destroy_event_channel(ch);
	puts("cm_mixed ok");
	return 0;
}
