// Command xdshelper is the gRPC side of the xds package's end-to-end test.
// grpc-go reads GRPC_XDS_BOOTSTRAP when the process starts, so the test
// runs these as subprocesses, each with its own bootstrap.
//
//	xdshelper serve -cert C -key K -ca CA NAME...
//
// starts one xDS-enabled gRPC server per NAME on 127.0.0.1, prints
// {"name": NAME, "addr": "127.0.0.1:PORT"} per server, and answers every
// method with an empty message and the header x-served-by: NAME, until its
// standard input closes. Its RBAC comes from the inbound Listener the agent
// serves for the address.
//
//	xdshelper client -cert C -key K -ca CA
//
// reads lines "TARGET METHOD N" from standard input, makes N unary calls
// of METHOD on TARGET (an xds:/// URI) over one channel per target, and
// prints {"served": {NAME: count}, "codes": {CODE: count}} per line.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/emptypb"
)

func main() {
	log.SetFlags(log.Lmicroseconds)
	if len(os.Args) < 2 {
		log.Fatal("usage: xdshelper serve|client [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	cert := fs.String("cert", "", "certificate file")
	key := fs.String("key", "", "key file")
	ca := fs.String("ca", "", "CA certificate file")
	_ = fs.Parse(os.Args[2:])
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	caPEM, err := os.ReadFile(*ca)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		log.Fatal("no CA certificate")
	}
	switch os.Args[1] {
	case "serve":
		serve(fs.Args(), &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	case "client":
		client(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool})
	default:
		log.Fatalf("unknown mode %q", os.Args[1])
	}
}

func serve(names []string, cfg *tls.Config) {
	enc := json.NewEncoder(os.Stdout)
	for _, name := range names {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		srv, err := xds.NewGRPCServer(
			grpc.Creds(credentials.NewTLS(cfg)),
			grpc.UnknownServiceHandler(echo(name)),
			xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
				log.Printf("%s on %s: serving mode %v (%v)", name, addr, args.Mode, args.Err)
			}),
		)
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			if err := srv.Serve(lis); err != nil {
				log.Printf("%s: %v", name, err)
			}
		}()
		if err := enc.Encode(map[string]string{"name": name, "addr": lis.Addr().String()}); err != nil {
			log.Fatal(err)
		}
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func echo(name string) grpc.StreamHandler {
	return func(_ any, stream grpc.ServerStream) error {
		var in emptypb.Empty
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if err := stream.SetHeader(metadata.Pairs("x-served-by", name)); err != nil {
			return err
		}
		return stream.SendMsg(&emptypb.Empty{})
	}
}

type result struct {
	Served map[string]int `json:"served"`
	Codes  map[string]int `json:"codes"`
	Last   string         `json:"last,omitempty"`
}

func client(cfg *tls.Config) {
	conns := map[string]*grpc.ClientConn{}
	enc := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		// TARGET METHOD N [wait]: wait makes each call wait for a ready
		// connection (grpc.WaitForReady) instead of failing on a transient
		// one, for tests of where calls go rather than of failures.
		f := strings.Fields(in.Text())
		if len(f) != 3 && (len(f) != 4 || f[3] != "wait") {
			log.Fatalf("bad command %q", in.Text())
		}
		var opts []grpc.CallOption
		if len(f) == 4 {
			opts = append(opts, grpc.WaitForReady(true))
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			log.Fatal(err)
		}
		conn := conns[f[0]]
		if conn == nil {
			conn, err = grpc.NewClient(f[0], grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				log.Fatal(err)
			}
			conns[f[0]] = conn
		}
		res := result{Served: map[string]int{}, Codes: map[string]int{}}
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var md metadata.MD
			err := conn.Invoke(ctx, f[1], &emptypb.Empty{}, &emptypb.Empty{}, append(opts, grpc.Header(&md))...)
			cancel()
			code := status.Code(err)
			res.Codes[code.String()]++
			if err != nil {
				res.Last = err.Error()
				continue
			}
			res.Served[strings.Join(md.Get("x-served-by"), ",")]++
		}
		if err := enc.Encode(res); err != nil {
			log.Fatal(err)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
