package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		environ []string
		wantErr string
	}{
		{name: "help", args: []string{"-h"}},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"-config", "x.yaml", "extra"}, wantErr: "unexpected arguments"},
		{name: "missing file", args: []string{"-config", "/nonexistent/gw.yaml"}, wantErr: "/nonexistent/gw.yaml"},
		{name: "file from env", environ: []string{"SWITCHYARD_CONFIG=/nonexistent/env.yaml"}, wantErr: "/nonexistent/env.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, tt.environ, &out)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
