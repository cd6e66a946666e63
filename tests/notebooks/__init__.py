"""The course notebooks as a whole: run with and without solutions, wrong answers, structure, GPU claims."""
