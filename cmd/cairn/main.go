// Command cairn formats, mounts and administers Cairn volumes.
//
// Every verb that works on a volume takes the volume's metadata URL first:
// cairn VERB META-URL ...
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn: a shared POSIX file system for clusters",
		Long: `Cairn keeps metadata in its own engine and file content in an object store.

Quick start (embedded: one host, no other service):
  cairn format pebble:///var/lib/cairn/meta myvol
  cairn mount -d pebble:///var/lib/cairn/meta /mnt/cairn

Every flag can also be set in the environment as CAIRN_<FLAG>, upper case
with - as _ (--cache-mem 1G: CAIRN_CACHE_MEM=1G); the command line wins.

Credentials: an S3 data store's key pair comes from the environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the
shared credentials and config files (--s3-credentials-file, --s3-profile;
by default ~/.aws/credentials, AWS_PROFILE or "default"), else, on AWS, a
web identity, container or instance role. A PostgreSQL password comes from
the URL, PGPASSWORD, or the password file (PGPASSFILE, ~/.pgpass).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		// Every flag may come from the environment instead.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			return s3Files.apply()
		},
	}
	s3Files.register(root.PersistentFlags())
	root.SetVersionTemplate("cairn {{.Version}}\n")
	root.AddCommand(
		newFormatCommand(),
		newMountCommand(),
		newUmountCommand(),
		newStatusCommand(),
		newConfigCommand(),
		newQuotaCommand(),
		newInfoCommand(),
		newFsckCommand(),
		newGCCommand(),
		newStatsCommand(),
		newBenchCommand(),
		newWarmupCommand(),
		newSnapshotCommand(),
		newTrashCommand(),
		newDumpCommand(),
		newLoadCommand(),
		newBackupCommand(),
		newReplicateCommand(),
		newFindCommand(),
		newGenDumpCommand(),
		newDestroyCommand(),
		newGatewayCommand(),
		newVersionCommand(),
		newGenManCommand(),
	)
	withEnvNotes(root)
	return root
}

// s3FileFlags are the flags that choose the shared AWS credentials file
// and profile of S3 data stores, for every command. They set the variables
// the AWS tools read (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE), which a
// mount process started by -d inherits.
type s3FileFlags struct{ file, profile string }

var s3Files s3FileFlags

func (s *s3FileFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.file, "s3-credentials-file", "", "the shared credentials file of S3 data stores (default: AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials)")
	f.StringVar(&s.profile, "s3-profile", "", "the profile of that file to use (default: AWS_PROFILE, or default)")
}

// apply exports the flags given to the variables the S3 store reads.
func (s *s3FileFlags) apply() error {
	if s.file != "" {
		abs, err := filepath.Abs(s.file)
		if err != nil {
			return fmt.Errorf("--s3-credentials-file: %w", err)
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("--s3-credentials-file: %w", err)
		}
		os.Setenv("AWS_SHARED_CREDENTIALS_FILE", abs)
	}
	if s.profile != "" {
		os.Setenv("AWS_PROFILE", s.profile)
	}
	return nil
}

// flagEnvPrefix: flag --some-flag may be given as CAIRN_SOME_FLAG.
const flagEnvPrefix = "CAIRN_"

// flagEnv is the environment variable that sets flag name.
func flagEnv(name string) string {
	return flagEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagsFromEnv sets each flag of cmd not given on the command line from
// its environment variable (flagEnv), if that is set: the command line
// wins. A value the flag refuses is an error that names the variable.
func flagsFromEnv(cmd *cobra.Command) error {
	fromEnv = map[string]string{} // this command's only
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" || f.Name == "version" {
			return
		}
		env := flagEnv(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if serr := cmd.Flags().Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q (--%s): %w", env, v, f.Name, serr)
				return
			}
			fromEnv[f.Name] = fmt.Sprintf("%s=%q", env, v)
		}
	})
	return err
}

// fromEnv maps the flags this process took from the environment to the
// variable that set them, for error messages (envNote).
var fromEnv = map[string]string{}

// envNote adds to err, which names flag --X, that the environment set X,
// so that the operator knows where to look.
func envNote(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for name, set := range fromEnv {
		if strings.Contains(msg, "--"+name) {
			return fmt.Errorf("%w (--%s was set by %s)", err, name, set)
		}
	}
	return err
}

// withEnvNotes makes every command of the tree under c report, in its
// errors, the flags the environment set (envNote).
func withEnvNotes(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error { return envNote(run(cmd, args)) }
	}
	for _, sub := range c.Commands() {
		withEnvNotes(sub)
	}
}

func main() {
	root := newRootCommand()
	if isMountHelper(os.Args[0]) {
		// mount(8)'s helper for type cairn (mounthelper.go).
		mount, _, _ := root.Find([]string{"mount"})
		args, fake, verbose, err := mountHelperArgs(os.Args[1:], mount.Flags())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if fake {
			os.Exit(0)
		}
		if !verbose {
			root.SetOut(io.Discard)
		}
		// The mount process must find this command again: it runs as
		// cairn, not as the helper.
		os.Args = append([]string{os.Args[0]}, args...)
		root.SetArgs(args)
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "cairn: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
