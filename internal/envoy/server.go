package envoy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServerConfig is the gRPC listener's: where, and its optional TLS.
type ServerConfig struct {
	Addr string // host:port; port 0 picks one
	// CertFile and KeyFile turn on TLS (both or neither). ClientCAFile
	// turns on mTLS: a client must present a certificate it signed.
	CertFile, KeyFile string
	ClientCAFile      string
}

// Server is the gRPC listener of the Envoy rate-limit service, with gRPC
// health checking and reflection.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	lis    net.Listener
}

// streamWorkers is how many kept goroutines run calls. A call that finds
// none idle runs on a new goroutine, whose stack grows again through
// gRPC, the limiter and go-redis on every call; each call waits for Redis,
// so the workers must cover the calls in flight, not the cores. Enough
// for the calls a gateway fleet keeps in flight; an idle worker costs
// its stack.
const streamWorkers = 256

// The flow-control windows, static (Listen).
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// ServiceName is the gRPC service otpguard serves to Envoy.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Listen binds cfg.Addr and readies svc on it; Serve serves it.
func Listen(cfg ServerConfig, svc *Service) (*Server, error) {
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(streamWorkers),
		// Static flow-control windows: no BDP estimation, whose ping (and
		// a window update before it) gRPC otherwise writes on a request's
		// data when the last ping is answered, one call in flight on a
		// connection being a ping per call, each a write and a read more.
		// A rate-limit request is a few hundred bytes: 64 KiB a stream and
		// 1 MiB a connection never hold one back.
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.ClientCAFile != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("envoy: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{grpc: grpc.NewServer(opts...), health: health.NewServer(), lis: lis}
	ratelimitv3.RegisterRateLimitServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// tlsConfig loads the certificate files; TLS 1.2 at least.
func tlsConfig(cfg ServerConfig) (*tls.Config, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("envoy: TLS needs both a certificate and a key file")
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("envoy: TLS certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("envoy: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("envoy: client CA %s: no PEM certificate in it", cfg.ClientCAFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Addr is the address bound.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until Stop; it returns nil after Stop.
func (s *Server) Serve() error {
	if err := s.grpc.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("envoy: serve: %w", err)
	}
	return nil
}

// Stop says NOT_SERVING to health checks, lets the calls under way finish
// until ctx ends, then closes what remains.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}
