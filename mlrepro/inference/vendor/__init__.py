"""A vendor's closed-division inference code (NVIDIA's ``closed/NVIDIA`` of any round) as a plug-in: its Makefiles
read for the round's steps (makefiles, flow), its configs read for the user.conf each run gets (nvconfig), the
preview of every (system, benchmark, scenario, mode) before any GPU hour (preview), and the flow's jobs (steps).
Everything here reads the folder as text: nothing of the vendor's code is imported or run while planning.
"""
