package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
)

func (c *cli) version(args []string) error {
	fs := c.newFlags("version", "[--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	v := versionInfo()
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(v)
	}
	printf(c.stdout, "jobstage %s", v.Version)
	if v.Revision != "" {
		printf(c.stdout, " (%s%s)", v.Revision, map[bool]string{true: ", modified"}[v.Modified])
	}
	printf(c.stdout, " %s %s/%s\n", v.Go, runtime.GOOS, runtime.GOARCH)
	return nil
}

type buildVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func versionInfo() buildVersion {
	v := buildVersion{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
			if len(v.Revision) > 12 {
				v.Revision = v.Revision[:12]
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}
