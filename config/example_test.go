package config_test

import (
	"fmt"

	"github.com/jobstage/jobstage/config"
)

func ExampleParse() {
	src := `
types:
  resize: {activity_timeout: 1m}
pipelines:
  thumbnails:
    type: resise
    concurency: 4
    handler:
      exec: {command: [convert, "-", "-resize", "128x128", "-"]}
`
	_, problems := config.Parse("jobstage.yaml", []byte(src), nil)
	for _, p := range problems {
		fmt.Println(p)
	}
	// Output:
	// jobstage.yaml:6:11: pipelines.thumbnails.type: unknown type "resise"; declared: resize (did you mean "resize"?)
	// jobstage.yaml:7:5: pipelines.thumbnails.concurency: unknown key (did you mean "concurrency"?)
}

func ExampleEnvName() {
	fmt.Println(config.EnvName("types", "send-email", "retry", "max_attempts"))
	// Output:
	// JOBSTAGE_TYPES__SEND_EMAIL__RETRY__MAX_ATTEMPTS
}
