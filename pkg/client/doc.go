// Package client is the Go SDK of Airlock's exec gateway: create sandboxes, run commands in them (whole or
// streamed), move files, and hand a model its tools and the observation of a command. The concepts and
// names match the Python and TypeScript SDKs (docs/sdk.md).
//
//	c, err := client.New(client.Options{}) // AIRLOCK_API_URL, AIRLOCK_API_KEY
//	sbx, err := c.Create(ctx, client.CreateOptions{Network: "restricted"})
//	defer sbx.Terminate(context.WithoutCancel(ctx))
//	res, err := sbx.Exec(ctx, "python -V", client.ExecOptions{})
//	fmt.Println(client.FormatObservation(res, client.ObservationOptions{}))
//
// A command that ran is a result, whatever its exit code or outcome (a timeout is exit code 124, outcome
// "timeout"); errors are for calls that did not run, and match the sentinels (ErrNotFound, ErrRateLimited, ...)
// with errors.Is, or *Error with errors.As.
package client
