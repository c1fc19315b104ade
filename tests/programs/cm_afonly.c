/* Two wildcard listeners on one port, one bound with AF_INET and one
 * with AF_INET6 and RDMA_OPTION_ID_AFONLY: the kernel's rdma_cm lets
 * them share the port (cma_check_port skips ids of two families that are
 * both address-family only), and each takes the requests of its family
 * (cma_match_private_data). Without AFONLY, the AF_INET6 wildcard takes
 * both families, so it cannot bind the port the AF_INET one holds
 * (EADDRNOTAVAIL).
 *
 *   cm_afonly V4ADDR V6ADDR PORT
 *
 * V4ADDR and V6ADDR are addresses of softverbs devices. One process
 * listens and connects to each address; the requests are rejected once
 * seen. Prints "cm afonly ok" on success. */
#include "cm_util.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sockaddr_storage address(const char *ip, int port)
{
	struct sockaddr_storage a;
	memset(&a, 0, sizeof a);
	struct sockaddr_in *v4 = (struct sockaddr_in *)&a;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a;
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
	} else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
	} else {
		fprintf(stderr, "not an address: %s\n", ip);
		exit(2);
	}
	return a;
}

/* A listener bound to `ip`:`port`, AFONLY set to `afonly` unless it is
 * -1; NULL (errno set) if the bind fails. */
static struct rdma_cm_id *listener(struct rdma_event_channel *ch, const char *ip, int port,
				   int afonly)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("rdma_create_id");
		exit(1);
	}
	if (afonly >= 0 &&
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly, sizeof afonly)) {
		perror("rdma_set_option AFONLY");
		exit(1);
	}
	struct sockaddr_storage a = address(ip, port);
	if (rdma_bind_addr(id, (struct sockaddr *)&a)) {
		int e = errno;
		rdma_destroy_id(id);
		errno = e;
		return NULL;
	}
	return id;
}

/* Connects to `ip`:`port`; the listener that gets the request must be
 * `want`. The request is rejected, and the connecting id hears so. */
static int request_reaches(struct rdma_event_channel *ch, const char *ip, int port,
			   struct rdma_cm_id *want, const char *who)
{
	struct rdma_cm_id *id, *got;
	struct sockaddr_storage dst = address(ip, port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, who) || rdma_resolve_route(id, 2000) ||
	    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, who)) {
		perror(who);
		return -1;
	}
	struct rdma_conn_param cp = {.retry_count = 1};
	if (rdma_connect(id, &cp)) {
		perror("rdma_connect");
		return -1;
	}
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 15000) != 1 || rdma_get_cm_event(ch, &ev)) {
		fprintf(stderr, "%s: no event\n", who);
		return -1;
	}
	int kind = ev->event;
	struct rdma_cm_id *heard_by = ev->listen_id;
	got = ev->id;
	rdma_ack_cm_event(ev);
	if (kind != RDMA_CM_EVENT_CONNECT_REQUEST) {
		fprintf(stderr, "%s: got %s, want CONNECT_REQUEST\n", who, rdma_event_str(kind));
		return -1;
	}
	if (heard_by != want) {
		fprintf(stderr, "%s: the request reached the other listener\n", who);
		return -1;
	}
	if (rdma_reject(got, NULL, 0) || expect(ch, RDMA_CM_EVENT_REJECTED, who))
		return -1;
	rdma_destroy_id(got);
	rdma_destroy_id(id);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cm_afonly V4ADDR V6ADDR PORT\n");
		return 2;
	}
	int port = atoi(argv[3]);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		perror("rdma_create_event_channel");
		return 1;
	}
	struct rdma_cm_id *l4 = listener(ch, "0.0.0.0", port, -1);
	if (!l4) {
		perror("bind 0.0.0.0");
		return 1;
	}
	if (listener(ch, "::", port, 0) || errno != EADDRNOTAVAIL) {
		fprintf(stderr, "[::] without AFONLY: want EADDRNOTAVAIL, got %s\n", strerror(errno));
		return 1;
	}
	struct rdma_cm_id *l6 = listener(ch, "::", port, 1);
	if (!l6) {
		perror("bind [::] with AFONLY");
		return 1;
	}
	if (rdma_listen(l4, 4) || rdma_listen(l6, 4)) {
		perror("rdma_listen");
		return 1;
	}
	if (request_reaches(ch, argv[1], port, l4, "IPv4 request") ||
	    request_reaches(ch, argv[2], port, l6, "IPv6 request"))
		return 1;
	rdma_destroy_id(l4);
	rdma_destroy_id(l6);
	rdma_destroy_event_channel(ch);
	printf("cm afonly ok\n");
	return 0;
}
