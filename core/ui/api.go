package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// cookieName holds a session's opaque ID after a login (sessions). It is
// HttpOnly and SameSite=Strict, so scripts and other sites cannot use it,
// and Secure when the UI serves HTTPS.
const cookieName = "meshrelay_ui"

// Bounds on what a request may send and how long answers may take.
const (
	maxLoginBytes = 4 << 10
	writeTimeout  = 30 * time.Second
)

var jsonOptions = protojson.MarshalOptions{EmitUnpopulated: true}

// token returns the caller's admin token: the Authorization header's
// bearer token, else the token of the live session the cookie names.
func (s *Server) token(r *http.Request) string {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(tok)
	}
	return s.sessions.token(sessionID(r))
}

// sessionID returns the session the request's cookie names, if any.
func sessionID(r *http.Request) string {
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	return ""
}

// adminContext returns ctx carrying tok as the admin API expects it.
func adminContext(ctx context.Context, tok string) context.Context {
	return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
}

// authorizer is the admin API's check of a caller's token alone, when it
// has one (server.Server.AdminServer's): the UI checks the token of
// each request for what it serves from its caches.
type authorizer interface {
	Authorize(ctx context.Context) error
}

// authorize checks the token ctx carries with the admin API: with its
// Authorize, else with the cheapest reading call.
func (s *Server) authorize(ctx context.Context) error {
	if a, ok := s.admin.(authorizer); ok {
		return a.Authorize(ctx)
	}
	_, err := s.admin.ListClusters(ctx, &relayv1.ListClustersRequest{})
	return err
}

// get serves a reading admin call as protojson.
func (s *Server) get(call func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		resp, err := call(adminContext(r.Context(), s.token(r)), r)
		if err != nil {
			s.writeCallError(w, err)
			return
		}
		switch v := resp.(type) {
		case proto.Message:
			writeProto(w, v)
		case string:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, v)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	data, err := jsonOptions.Marshal(m)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

// callStatus is the HTTP status of an admin call's error code; any other
// code is a 500.
var callStatus = map[codes.Code]int{
	codes.Unauthenticated:  http.StatusUnauthorized,
	codes.PermissionDenied: http.StatusForbidden,
	codes.NotFound:         http.StatusNotFound,
	codes.InvalidArgument:  http.StatusBadRequest,
	codes.Unavailable:      http.StatusServiceUnavailable,
	codes.Unimplemented:    http.StatusNotImplemented,
}

// writeCallError answers with the HTTP status of an admin call's error.
func (s *Server) writeCallError(w http.ResponseWriter, err error) {
	code, ok := callStatus[status.Code(err)]
	if !ok {
		code = http.StatusInternalServerError
	}
	if code == http.StatusInternalServerError {
		s.log.Warn("admin call failed", "error", err)
	}
	writeError(w, code, status.Convert(err).Message())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshrelay"`)
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// login checks a token against the admin API and, when it is valid, opens
// a session and sets its cookie. It accepts only JSON ({"token": "..."}),
// which a form on another site cannot send without the browser asking
// first.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, `login takes application/json: {"token": "ADMIN-TOKEN"}`)
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoginBytes)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "login: "+err.Error())
		return
	}
	req.Token = strings.TrimSpace(req.Token)
	if _, err := s.admin.ListClusters(adminContext(r.Context(), req.Token), &relayv1.ListClustersRequest{}); err != nil {
		s.writeCallError(w, err)
		return
	}
	s.setCookie(w, s.sessions.open(req.Token), int(s.opts.SessionLife/time.Second))
	w.WriteHeader(http.StatusNoContent)
}

// logout ends the cookie's session and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if id := sessionID(r); id != "" {
		s.sessions.close(id)
	}
	s.setCookie(w, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.opts.TLS != nil,
	})
}

// errStreamsFull refuses an event stream over Options.MaxStreams.
var errStreamsFull = errors.New("too many open event streams; try again later")

// outputsYAML returns a cluster's outputs of one backend as a stream of
// YAML documents, each headed by a comment naming the policies that
// produced it and its applied state.
func (s *Server) outputsYAML(ctx context.Context, cluster, backend string) (string, error) {
	if _, err := s.admin.DescribeCluster(ctx, &relayv1.DescribeRequest{Name: cluster}); err != nil {
		return "", err
	}
	list, err := s.admin.List(ctx, &relayv1.ListRequest{Kind: "outputs", Cluster: cluster, Backend: backend, Bodies: true})
	if err != nil {
		return "", err
	}
	if len(list.GetOutputs()) == 0 {
		return "", status.Errorf(codes.NotFound, "cluster %q has no %s outputs", cluster, backend)
	}
	var b strings.Builder
	for i, o := range list.GetOutputs() {
		if i > 0 {
			b.WriteString("---\n")
		}
		state := "applied"
		switch {
		case o.GetError() != "":
			state = "failed: " + o.GetError()
		case !o.GetApplied():
			state = "pending"
		}
		// The comment must stay one line: the agent's error is its text.
		fmt.Fprintf(&b, "# %s\n", meta.Printable(fmt.Sprintf("%s %s/%s from %s; %s", o.GetKind(), o.GetNamespace(), o.GetName(), strings.Join(o.GetPolicies(), ", "), state)))
		doc, err := yaml.JSONToYAML([]byte(o.GetBody()))
		if err != nil {
			doc = []byte(o.GetBody() + "\n")
		}
		b.Write(doc)
	}
	return b.String(), nil
}

// Bounds of the outputs a policy's page is sent: how many unless it asks
// for more (?outputs=N), and at most.
const (
	policyOutputs    = 200
	maxPolicyOutputs = 5000
)

// describePolicy answers a policy's page: its outline (DescribePolicy's,
// without outputs, its clusters in natural order: c2 before c10) with a
// page of its outputs, those of the clusters whose names contain ?match=
// (any case), the first ?outputs= of them in natural order of their
// clusters. Only the page's outputs are asked for: a fleet-wide policy has
// outputs in every cluster, tens of megabytes of them at a thousand
// clusters. The answer is the description's JSON with outputsTotal and
// outputsMatching, the counts before the bound, and stale when a newer
// page is being computed; each page comes from the shared cache.
func (s *Server) describePolicy(ctx context.Context, r *http.Request) (any, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	q := r.URL.Query()
	req := &relayv1.DescribeRequest{Kind: r.PathValue("kind"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Cluster: q.Get("cluster")}
	limit := policyOutputs
	if n, err := strconv.Atoi(q.Get("outputs")); err == nil && n > 0 {
		limit = min(n, maxPolicyOutputs)
	}
	match := strings.ToLower(q.Get("match"))
	key := fmt.Sprintf("policy %s/%s/%s@%s", req.Kind, req.Namespace, req.Name, req.Cluster)
	// A filtered page is one reader's: it must not push out the pages
	// every reader shares.
	get := s.shared.get
	if match != "" {
		get = s.shared.getFiltered
	}
	v, stale, err := get(ctx, fmt.Sprintf("%s outputs %d %q", key, limit, match), func(ctx context.Context) (any, int, error) {
		p, err := s.policyPage(ctx, key, req, match, limit)
		if err != nil {
			return nil, 0, err
		}
		return p, len(p.data), nil
	})
	if err != nil {
		return nil, err
	}
	p := v.(*policyPage)
	// data is a JSON object: add the counts as its first members.
	return json.RawMessage(fmt.Sprintf(`{"outputsTotal":%d,"outputsMatching":%d,"stale":%t,%s`, p.total, p.matching, stale, p.data[1:])), nil
}

// policyPage is a policy's description as JSON with a page of its
// outputs, and the counts of its outputs in all and in the clusters the
// page's filter keeps.
type policyPage struct {
	data            []byte
	total, matching int
}

// policyOutline describes the policy req names in outline, its clusters
// in natural order, from the shared cache under key: the pages of one
// policy share it.
func (s *Server) policyOutline(ctx context.Context, key string, req *relayv1.DescribeRequest) (*relayv1.PolicyDescription, error) {
	v, _, err := s.shared.get(ctx, key, func(ctx context.Context) (any, int, error) {
		outline := proto.CloneOf(req)
		outline.Outline = true
		d, err := s.admin.DescribePolicy(ctx, outline)
		if err != nil {
			return nil, 0, err
		}
		slices.SortStableFunc(d.Clusters, func(a, b *relayv1.PolicyCluster) int { return natural(a.GetCluster(), b.GetCluster()) })
		return d, proto.Size(d), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*relayv1.PolicyDescription), nil
}

// policyPage reads the outline of the policy req names (policyOutline,
// under key), then asks for the outputs of the clusters, in natural
// order, whose names contain match, as many clusters as it takes to hold
// limit outputs and at most limit outputs.
func (s *Server) policyPage(ctx context.Context, key string, req *relayv1.DescribeRequest, match string, limit int) (*policyPage, error) {
	outline, err := s.policyOutline(ctx, key, req)
	if err != nil {
		return nil, err
	}
	d := proto.CloneOf(outline)
	p := &policyPage{}
	page := proto.CloneOf(req)
	page.OutputLimit = int32(limit)
	for _, c := range d.GetClusters() {
		n := int(c.GetResources())
		p.total += n
		if n == 0 || !strings.Contains(strings.ToLower(c.GetCluster()), match) {
			continue
		}
		if p.matching < limit {
			page.OutputClusters = append(page.OutputClusters, c.GetCluster())
		}
		p.matching += n
	}
	if len(page.OutputClusters) > 0 {
		outputs, err := s.admin.DescribePolicy(ctx, page)
		if err != nil {
			return nil, err
		}
		d.Outputs = outputs.GetOutputs()
	}
	if p.data, err = jsonOptions.Marshal(d); err != nil {
		return nil, err
	}
	return p, nil
}

// natural compares strings with their runs of digits compared as
// numbers: c2 before c10.
func natural(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(len(na)-len(nb), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

// digits returns the length of s's leading run of ASCII digits.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
