package traffic

import (
	"math"
	"strconv"
	"strings"
)

// Edge is the traffic of one source workload to one destination service.
type Edge struct {
	// SourceWorkload is "namespace/name", or "unknown".
	SourceWorkload string
	// DestinationCluster is the cluster of the destination's workloads
	// when the proxies know it, else the reporting agent's cluster.
	DestinationCluster string
	// DestinationService is "namespace/name", or the host called.
	DestinationService string
	// Protocol is "http", "grpc" or "tcp".
	Protocol string
}

// MaxLabelBytes bounds each of an edge's names; a longer one is not
// accepted.
const MaxLabelBytes = 253

// Valid reports whether every name of e is non-empty, at most
// MaxLabelBytes long and printable.
func (e Edge) Valid() bool {
	for _, s := range []string{e.SourceWorkload, e.DestinationCluster, e.DestinationService, e.Protocol} {
		if s == "" || len(s) > MaxLabelBytes {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return false
			}
		}
	}
	return true
}

// Class is the class of a response's code.
type Class uint8

// The code classes. Errors are the server's failures: HTTP 5xx and the
// gRPC codes a server answers for (ClassGRPCServerError).
const (
	Class2xx Class = iota
	Class3xx
	Class4xx
	Class5xx
	ClassGRPCOK
	ClassGRPCClientError
	ClassGRPCServerError
	ClassOther
	NumClasses
)

var classNames = [NumClasses]string{"2xx", "3xx", "4xx", "5xx", "grpc_ok", "grpc_client_error", "grpc_server_error", "other"}

// String returns the class's label value, such as "5xx" or "grpc_ok".
func (c Class) String() string {
	if c >= NumClasses {
		return "other"
	}
	return classNames[c]
}

// Error reports whether requests of the class count as errors.
func (c Class) Error() bool { return c == Class5xx || c == ClassGRPCServerError }

// HTTPClass returns the class of an HTTP status code.
func HTTPClass(code int) Class {
	switch {
	case code >= 200 && code < 300:
		return Class2xx
	case code >= 300 && code < 400:
		return Class3xx
	case code >= 400 && code < 500:
		return Class4xx
	case code >= 500 && code < 600:
		return Class5xx
	}
	return ClassOther
}

// grpcCodes are the gRPC status codes by their names, as grpc-go's
// OpenTelemetry plugin reports them ("OK", "UNAVAILABLE").
var grpcCodes = map[string]int{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4,
	"NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8,
	"FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12,
	"INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// GRPCClass returns the class of a gRPC status, given as its number
// ("14") or its name ("UNAVAILABLE"). The server's failures are Unknown,
// DeadlineExceeded, ResourceExhausted, Unimplemented, Internal,
// Unavailable and DataLoss; the other codes but OK are the client's.
func GRPCClass(status string) Class {
	code, err := strconv.Atoi(status)
	if err != nil {
		var ok bool
		if code, ok = grpcCodes[strings.ToUpper(status)]; !ok {
			return ClassOther
		}
	}
	switch code {
	case 0:
		return ClassGRPCOK
	case 2, 4, 8, 12, 13, 14, 15:
		return ClassGRPCServerError
	case 1, 3, 5, 6, 7, 9, 10, 11, 16:
		return ClassGRPCClientError
	}
	return ClassOther
}

// Bounds are the upper bounds, in milliseconds, of the latency buckets;
// a last bucket takes the rest (+Inf).
var Bounds = [...]float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// NumBuckets counts the latency buckets, +Inf included.
const NumBuckets = len(Bounds) + 1

// Bucket returns the bucket that takes a latency of ms, or a source
// bucket whose upper bound is ms: the first whose bound is at least ms.
// A proxy's own buckets are folded into these by their upper bounds, so
// a latency is never counted faster than it was.
func Bucket(ms float64) int {
	for i, b := range Bounds {
		if ms <= b*(1+1e-9) {
			return i
		}
	}
	return len(Bounds)
}

// Stats are an edge's counts over a window.
type Stats struct {
	Codes         [NumClasses]uint64
	Latency       [NumBuckets]uint64
	LatencySumMS  float64
	BytesSent     uint64
	BytesReceived uint64
}

// Add adds o to s.
func (s *Stats) Add(o *Stats) {
	for i := range s.Codes {
		s.Codes[i] += o.Codes[i]
	}
	for i := range s.Latency {
		s.Latency[i] += o.Latency[i]
	}
	s.LatencySumMS += o.LatencySumMS
	s.BytesSent += o.BytesSent
	s.BytesReceived += o.BytesReceived
}

// Requests returns the requests of every class.
func (s *Stats) Requests() uint64 {
	var n uint64
	for _, c := range s.Codes {
		n += c
	}
	return n
}

// Errors returns the requests of the error classes.
func (s *Stats) Errors() uint64 {
	var n uint64
	for c, v := range s.Codes {
		if Class(c).Error() {
			n += v
		}
	}
	return n
}

// Empty reports whether s counts nothing.
func (s *Stats) Empty() bool { return *s == Stats{} }

// Quantile returns the q-quantile (0 < q ≤ 1) of the latency histogram in
// milliseconds, interpolated linearly inside its bucket as Prometheus's
// histogram_quantile does; the last bucket answers its lower bound. It is
// 0 without latencies.
func (s *Stats) Quantile(q float64) float64 {
	return quantile(s.Latency[:], q)
}

func quantile[T uint32 | uint64](h []T, q float64) float64 {
	var total uint64
	for _, c := range h {
		total += uint64(c)
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen uint64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if float64(seen+uint64(c)) >= rank {
			if i == len(Bounds) {
				return Bounds[len(Bounds)-1]
			}
			lower := 0.0
			if i > 0 {
				lower = Bounds[i-1]
			}
			frac := (rank - float64(seen)) / float64(c)
			return lower + (Bounds[i]-lower)*math.Max(0, math.Min(1, frac))
		}
		seen += uint64(c)
	}
	return Bounds[len(Bounds)-1]
}
