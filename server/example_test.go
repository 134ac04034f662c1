package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/server"
)

// An application embeds jobstage: the config declares the store, the type
// and a pipeline whose handler is a Go function the application registers
// by name; clients use the HTTP API as with `jobstage serve`.
func Example() {
	dir, err := os.MkdirTemp("", "jobstage-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	yaml := fmt.Sprintf(`
store: {path: %s}
types:
  resize: {}
pipelines:
  resize:
    type: resize
    concurrency: 4
    handler: {go: resize}
http: {listen: "127.0.0.1:0"}
logging: {level: error}
`, filepath.Join(dir, "data"))
	cfg, problems := config.Parse("embedded.yaml", []byte(yaml), nil)
	if len(problems) > 0 {
		log.Fatal(problems)
	}

	type image struct {
		Path  string `json:"path"`
		Width int    `json:"width"`
	}
	resize := func(ctx context.Context, j *consumer.Job[image]) (string, error) {
		return fmt.Sprintf("%s@%dw", j.Data.Path, j.Data.Width), nil
	}
	s, err := server.New(cfg, server.Options{
		Handlers: map[string]consumer.Handler[json.RawMessage, json.RawMessage]{"resize": consumer.Raw(resize)},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(ctx)

	cl := httpapi.NewClient("http://"+s.Addr(), "", nil)
	if _, err := cl.Enqueue(ctx, "resize", httpapi.NewJob{ID: "cat", Data: json.RawMessage(`{"path":"cat.jpg","width":64}`)}); err != nil {
		log.Fatal(err)
	}
	j, err := cl.Wait(ctx, "resize", "cat", fdbq.Finished, httpapi.MaxWait)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.State, j.Outcome, string(j.Result))
	// Output: finished succeeded "cat.jpg@64w"
}
