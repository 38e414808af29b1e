# The Strata installer: PC check, four questions, resumable model downloads, engine build, config, start.
