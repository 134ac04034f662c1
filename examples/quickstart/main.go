package main

import (
	"context"
	"fmt"
	"log"

	"github.com/jobstage/jobstage"
)

type Thumbnail struct {
	Image string `json:"image"`
}

func (Thumbnail) Kind() string { return "thumbnail" }

func main() {
	ctx := context.Background()
	c, err := jobstage.Open(ctx, jobstage.Config{Dir: "./jobstage-data"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Thumbnail]) error {
		fmt.Println("rendering", j.Data.Image)
		return nil
	}, nil)
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	job, err := jobstage.Enqueue(ctx, c, Thumbnail{Image: "cat.jpg"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	done, err := jobstage.Wait[Thumbnail](ctx, c, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Outcome)
}
