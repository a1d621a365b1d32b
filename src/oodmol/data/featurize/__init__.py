"""Featurisers: one molecule in, named arrays out (cached by `oodmol.data.store`)."""
