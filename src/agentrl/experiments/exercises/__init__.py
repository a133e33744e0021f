"""The chapter's seven exercises, each answered by a run (``agentrl exercise N``).

- ``catalog.py``: the seven exercises, their questions and the module of each;
- ``answers.py``: an exercise's answers, each a sentence with the figure that decides it;
- ``exercise_run.py``: ``ExerciseRun``, one exercise on one seed: the chapter's checkpoints it starts from
  (``--from RUN_DIR``, or trained first), its parts written as they end (resume), its answers checked;
- ``ex1_aggregation.py`` ... ``ex7_design_review.py``: one module per exercise (``NEEDS``, ``CHECKPOINTS``,
  ``run``, ``ANSWERS``, and where one reads better, ``draw``);
- ``seeds.py``: an exercise over seeds (``--seeds``), each answer's hold rate;
- ``command.py``: the command line.
"""
