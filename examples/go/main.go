// Command example calls the rate limiter's Limit with connect-go's
// generated client of ratelimit.v1, over Connect JSON, and handles a
// denial: run `make run`, then `go run ./examples/go`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:7070", "the API")
	token := flag.String("token", os.Getenv("UNKEY_TOKEN"), "a key (none on an open server)")
	identifier := flag.String("identifier", "example_go", "who is limited")
	flag.Parse()

	client := ratelimitv1connect.NewRatelimitServiceClient(http.DefaultClient, *url, connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		req := connect.NewRequest(&ratelimitv1.LimitRequest{
			Namespace:  "examples",
			Identifier: *identifier,
			Limit:      2,      // two requests…
			Duration:   60_000, // …a minute
		})
		if *token != "" {
			req.Header().Set("Authorization", "Bearer "+*token)
		}
		res, err := client.Limit(ctx, req)
		var ce *connect.Error
		switch {
		case errors.As(err, &ce):
			fmt.Fprintf(os.Stderr, "request %d: %s: %s\n", i, ce.Code(), ce.Message())
			os.Exit(1)
		case err != nil:
			fmt.Fprintf(os.Stderr, "request %d: %v\n", i, err)
			os.Exit(1)
		case !res.Msg.Success:
			// Denied: tell the caller when to come back.
			fmt.Printf("request %d: denied, retry in %d ms\n", i, res.Msg.RetryAfter)
		default:
			fmt.Printf("request %d: passed, %d left\n", i, res.Msg.Remaining)
		}
	}
}
