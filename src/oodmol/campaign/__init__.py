"""Discovery campaigns (BOOM's Appendix C.8): does a model that cannot extrapolate still rank
the extreme molecules of the OOD pool well enough to find them?"""
