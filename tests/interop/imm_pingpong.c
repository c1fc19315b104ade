/* Immediate data between two verbs devices of any provider (rxe, softverbs):
 * an RC QP pair, connected through a TCP exchange in the manner of
 * ibv_rc_pingpong, over which each side in turn sends
 *   RDMA WRITE_WITH_IMM of 4096 bytes (4 packets at path MTU 1024),
 *   SEND_WITH_IMM of 3000 bytes (3 packets),
 *   RDMA WRITE_WITH_IMM of 0 bytes (the immediate alone),
 * and the other checks each completion's opcode, IBV_WC_WITH_IMM flag,
 * byte_len and ntohl(imm_data), and every byte that arrived. The client
 * sends first, then the server. Prints "imm ok: ..." on success.
 *
 * Usage: imm_pingpong -d DEV -g GID_INDEX [-p PORT] [SERVER]
 * Every wait has a deadline (completion channel and poll(2), no sleeps). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "imm_pingpong: " __VA_ARGS__); \
	fputc('\n', stderr); exit(1); } } while (0)
#define BUF_LEN 65536
#define WRITE_OFF 0		/* the peer's WRITE_WITH_IMM lands here */
#define RECV_OFF 16384		/* three receive buffers of RECV_LEN */
#define RECV_LEN 4096
#define SEND_OFF 32768		/* what this side sends from */
#define WAIT_MS 10000

struct peer { uint32_t qpn, psn, rkey; uint64_t addr; union ibv_gid gid; };

/* The three messages one side sends: opcode, length, immediate. */
static const struct msg { enum ibv_wr_opcode op; uint32_t len; uint32_t imm; } MSGS[3] = {
	{ IBV_WR_RDMA_WRITE_WITH_IMM, 4096, 0x12345678 },
	{ IBV_WR_SEND_WITH_IMM, 3000, 0x9abcdef0 },
	{ IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0x00c0ffee },
};

static struct ibv_context *ctx;
static struct ibv_comp_channel *chan;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static uint8_t *buf;

/* pattern: the bytes side `from` sends in message `m` (so a byte that
 * lands in the wrong place or from the wrong message is seen). */
static uint8_t pattern(int from, int m, uint32_t i) { return (uint8_t)(i * 13 + m * 31 + from * 101 + 7); }

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			struct ibv_context *c = ibv_open_device(list[i]);
			CHECK(c, "ibv_open_device %s: %s", name, strerror(errno));
			ibv_free_device_list(list);
			return c;
		}
	CHECK(0, "no device %s", name);
	return NULL;
}

static int tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	CHECK(getaddrinfo(host, port, &hints, &res) == 0, "getaddrinfo %s", host);
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	CHECK(fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0,
	      "connect to %s port %s: %s", host, port, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

static int tcp_accept(const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res;
	CHECK(getaddrinfo(NULL, port, &hints, &res) == 0, "getaddrinfo port %s", port);
	int one = 1, lfd = socket(res->ai_family, SOCK_STREAM, 0);
	CHECK(lfd >= 0, "socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(lfd, res->ai_addr, res->ai_addrlen) == 0 && listen(lfd, 1) == 0,
	      "listen on port %s: %s", port, strerror(errno));
	freeaddrinfo(res);
	int fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept: %s", strerror(errno));
	close(lfd);
	return fd;
}

/* exchange: sends ours as one text line, reads the peer's. */
static struct peer exchange(int fd, const struct peer *me)
{
	char line[128], gid[33];
	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", me->gid.raw[i]);
	int n = snprintf(line, sizeof(line), "%06x %06x %08x %016llx %s\n", me->qpn, me->psn,
			 me->rkey, (unsigned long long)me->addr, gid);
	CHECK(write(fd, line, n) == n, "sending our QP's address: %s", strerror(errno));
	size_t got = 0;
	while (got < (size_t)n) {
		ssize_t r = read(fd, line + got, n - got);
		CHECK(r > 0, "reading the peer's QP address: %s", r ? strerror(errno) : "closed");
		got += r;
	}
	struct peer p;
	unsigned long long addr;
	CHECK(sscanf(line, "%x %x %x %llx %32s", &p.qpn, &p.psn, &p.rkey, &addr, gid) == 5,
	      "bad address line from the peer");
	p.addr = addr;
	for (int i = 0; i < 16; i++)
		sscanf(gid + 2 * i, "%2hhx", &p.gid.raw[i]);
	return p;
}

/* sync: one byte each way, so neither side sends before the other posted
 * its receives. */
static void sync_peer(int fd)
{
	char c = 's';
	CHECK(write(fd, &c, 1) == 1 && read(fd, &c, 1) == 1, "TCP sync with the peer failed");
}

static void connect_qp(const struct peer *p, uint32_t psn, int gidx)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "modify_qp INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->qpn;
	a.rq_psn = p->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "modify_qp RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify_qp RTS: %s", strerror(errno));
}

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* next_wc: the next completion, waiting on the channel until the deadline. */
static struct ibv_wc next_wc(const char *what)
{
	struct ibv_wc wc;
	long long deadline = now_ms() + WAIT_MS;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "%s: completion status %s (%d), wr_id %llu",
			      what, ibv_wc_status_str(wc.status), wc.status, (unsigned long long)wc.wr_id);
			return wc;
		}
		CHECK(!ibv_req_notify_cq(cq, 0), "ibv_req_notify_cq failed");
		n = ibv_poll_cq(cq, 1, &wc); /* one that came before the request */
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "%s: completion status %s (%d)",
			      what, ibv_wc_status_str(wc.status), wc.status);
			return wc;
		}
		long long left = deadline - now_ms();
		CHECK(left > 0, "%s: no completion within %d ms", what, WAIT_MS);
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
		int r = poll(&pfd, 1, (int)left);
		CHECK(r >= 0, "poll: %s", strerror(errno));
		if (r == 1) {
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			CHECK(!ibv_get_cq_event(chan, &ev_cq, &ev_ctx), "ibv_get_cq_event failed");
			ibv_ack_cq_events(ev_cq, 1);
		}
	}
}

static void post_recvs(void)
{
	for (int i = 0; i < 3; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + RECV_OFF + i * RECV_LEN),
				       .length = RECV_LEN, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(qp, &wr, &bad), "ibv_post_recv: %s", strerror(errno));
	}
}

static void send_all(int me, const struct peer *p)
{
	for (int m = 0; m < 3; m++) {
		uint8_t *src = buf + SEND_OFF + m * RECV_LEN;
		for (uint32_t i = 0; i < MSGS[m].len; i++)
			src[i] = pattern(me, m, i);
		struct ibv_sge sge = { .addr = (uintptr_t)src, .length = MSGS[m].len, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = m, .sg_list = &sge, .num_sge = MSGS[m].len ? 1 : 0,
			.opcode = MSGS[m].op, .send_flags = IBV_SEND_SIGNALED,
			.imm_data = htonl(MSGS[m].imm) }, *bad;
		wr.wr.rdma.remote_addr = p->addr + WRITE_OFF + m * 8192;
		wr.wr.rdma.rkey = p->rkey;
		CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send message %d: %s", m, strerror(errno));
	}
	for (int m = 0; m < 3; m++) {
		struct ibv_wc wc = next_wc("send completion");
		CHECK(wc.opcode == (MSGS[wc.wr_id].op == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE),
		      "send completion %llu has opcode %d", (unsigned long long)wc.wr_id, wc.opcode);
	}
}

/* check_bytes: LEN bytes at AT are what side FROM sent as message M. */
static void check_bytes(const uint8_t *at, uint32_t len, int from, int m)
{
	for (uint32_t i = 0; i < len; i++)
		CHECK(at[i] == pattern(from, m, i), "message %d byte %u is 0x%02x, not 0x%02x",
		      m, i, at[i], pattern(from, m, i));
}

static void receive_all(int peer_side)
{
	int recv_index = 0;
	for (int m = 0; m < 3; m++) {
		struct ibv_wc wc = next_wc("receive completion");
		int is_send = MSGS[m].op == IBV_WR_SEND_WITH_IMM;
		CHECK(wc.opcode == (is_send ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM),
		      "message %d completed with opcode %d", m, wc.opcode);
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "message %d: no IBV_WC_WITH_IMM", m);
		CHECK(ntohl(wc.imm_data) == MSGS[m].imm, "message %d: immediate 0x%08x, sent 0x%08x",
		      m, ntohl(wc.imm_data), MSGS[m].imm);
		CHECK(wc.byte_len == MSGS[m].len, "message %d: byte_len %u, sent %u", m, wc.byte_len,
		      MSGS[m].len);
		CHECK(wc.wr_id == (uint64_t)(100 + recv_index), "message %d consumed receive %llu", m,
		      (unsigned long long)wc.wr_id);
		recv_index++;
		if (is_send)
			check_bytes(buf + RECV_OFF + (wc.wr_id - 100) * RECV_LEN, MSGS[m].len, peer_side, m);
		else
			check_bytes(buf + WRITE_OFF + m * 8192, MSGS[m].len, peer_side, m);
	}
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *port = "18515";
	int gidx = -1, c;
	while ((c = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = optarg; break;
		default: CHECK(0, "usage: imm_pingpong -d DEV -g GID_INDEX [-p PORT] [SERVER]");
		}
	}
	CHECK(dev && gidx >= 0, "usage: imm_pingpong -d DEV -g GID_INDEX [-p PORT] [SERVER]");
	const char *server = optind < argc ? argv[optind] : NULL;
	int me = server ? 0 : 1; /* the client sends first */

	ctx = open_dev(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
	CHECK(!posix_memalign((void **)&buf, 4096, BUF_LEN), "out of memory");
	memset(buf, 0, BUF_LEN);
	mr = ibv_reg_mr(pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	chan = ibv_create_comp_channel(ctx);
	CHECK(chan, "ibv_create_comp_channel: %s", strerror(errno));
	cq = ibv_create_cq(ctx, 16, NULL, chan, 0);
	CHECK(cq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));

	struct peer mine = { .qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 2654435761u) & 0xffffff,
			     .rkey = mr->rkey, .addr = (uintptr_t)buf };
	CHECK(!ibv_query_gid(ctx, 1, gidx, &mine.gid), "ibv_query_gid %d: %s", gidx, strerror(errno));
	int fd = server ? tcp_connect(server, port) : tcp_accept(port);
	struct peer p = exchange(fd, &mine);
	connect_qp(&p, mine.psn, gidx);
	post_recvs();
	sync_peer(fd);
	if (me == 0) {
		send_all(me, &p);
		receive_all(1);
	} else {
		receive_all(0);
		send_all(me, &p);
	}
	sync_peer(fd); /* the peer has its completions: the QPs may go */
	printf("imm ok: sent and received WRITE_WITH_IMM 4096 B, SEND_WITH_IMM 3000 B, WRITE_WITH_IMM 0 B\n");
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(chan);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	close(fd);
	return 0;
}
