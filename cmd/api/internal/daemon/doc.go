// Package daemon is the API server's composition root: [LoadConfig] reads
// the environment, [New] builds one process from it (the stores the
// configuration names, the limiter, the domain services, the pipeline, the
// shared transport layer and every protocol's adapter) and [Daemon.Serve]
// runs it: the servers, the background loops, and the shutdown that orders
// them. [Run] is the whole of `api` with no arguments.
//
// The rules of the root, which keep it readable as the service grows:
//
//   - Every protocol is an [Adapter]: it is built from what it serves with
//     (the transport layer, the pipeline, the domain services it calls),
//     registers its HTTP routes and its grpc-go services, names them for
//     health, reflection and the answer to an unknown path, and names its
//     codec hooks. A new protocol is a package under cmd/api/internal and
//     one line in [New].
//   - Every background task is a [Loop]: Run works until its context ends
//     and then returns nil. Serve starts them all in one place and stops
//     them in one place, after the servers, so that the final flushes carry
//     the last requests.
//   - New starts nothing; tests build a Daemon exactly as main does and
//     serve it on their own listeners.
package daemon
