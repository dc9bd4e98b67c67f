"""MemoryCPT's offline construction (QAD, arXiv 2608.04843 Sec. 3): the four episodic roles
(segmenter, episode generator, merger, fact extractor), their prompts, output validators and the
date resolution they share. :class:`~.episodic.EpisodicBuilder` builds a scope's episodic and
semantic memory bank from its records."""
